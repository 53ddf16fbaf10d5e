from brook.record.records import RecordFields

def decode_records(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    /,
) -> list[RecordFields] | None: ...
