"""The cluster metadata as every process sees it, the controllers' and the tools' alike.

- ``image``: ``MetadataImage``, the one interpretation of the metadata records, and
  ``replay``, which applies a snapshot or a delta and answers what changed;
- ``delta``: ``MetadataUpdate`` (one message of the stream) and ``MetadataDelta`` (what it
  changed);
- ``info`` and ``cache``: the typed reads (``BrokerInfo``, ``PartitionInfo``, ``TopicInfo``)
  that request handlers use, refreshed from each delta;
- ``digest``: whether two copies of the metadata are equal.

Nothing outside this package dispatches on a record's kind.
"""
