"""meta.properties: which node and cluster a data directory belongs to."""

from __future__ import annotations

from pathlib import Path

import pytest

from brook.membership import MetaProperties, MetaPropertiesError, MetaPropertiesStore
from brook.membership.meta_properties import (
    META_PROPERTIES_FILE,
    read_meta_properties,
    write_meta_properties,
)

CLUSTER = "KtfDNMx1TJafnrTI2ih6tw"
OTHER_CLUSTER = "AAAAAAAAAAAAAAAAAAAAAA"


def _dirs(tmp_path: Path, count: int) -> list[Path]:
    paths = [tmp_path / f"data-{i}" for i in range(count)]
    for path in paths:
        path.mkdir()
    return paths


def test_the_file_is_kafkas_properties_format_and_reads_back(tmp_path: Path) -> None:
    write_meta_properties(tmp_path, MetaProperties(3, CLUSTER))

    lines = (tmp_path / META_PROPERTIES_FILE).read_text().splitlines()
    assert {"version=1", "node.id=3", f"cluster.id={CLUSTER}"} <= set(lines)
    assert read_meta_properties(tmp_path) == MetaProperties(3, CLUSTER)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_a_directory_without_the_file_has_not_joined_a_cluster(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path) is None
    assert MetaPropertiesStore(_dirs(tmp_path, 2), 1).load() is None


def test_store_records_the_cluster_in_every_data_directory(tmp_path: Path) -> None:
    dirs = _dirs(tmp_path, 3)
    store = MetaPropertiesStore(dirs, 1)

    store.store(CLUSTER)

    assert [read_meta_properties(d) for d in dirs] == [MetaProperties(1, CLUSTER)] * 3
    assert MetaPropertiesStore(dirs, 1).load() == CLUSTER


def test_a_directory_of_another_node_is_refused_naming_both_ids(tmp_path: Path) -> None:
    dirs = _dirs(tmp_path, 2)
    write_meta_properties(dirs[1], MetaProperties(7, CLUSTER))

    with pytest.raises(MetaPropertiesError, match=r"belongs to node 7, not to this node \(1\)"):
        MetaPropertiesStore(dirs, 1).load()


def test_directories_of_two_clusters_are_refused(tmp_path: Path) -> None:
    dirs = _dirs(tmp_path, 2)
    write_meta_properties(dirs[0], MetaProperties(1, CLUSTER))
    write_meta_properties(dirs[1], MetaProperties(1, OTHER_CLUSTER))

    with pytest.raises(MetaPropertiesError, match="different clusters"):
        MetaPropertiesStore(dirs, 1).load()


def test_store_never_overwrites_another_clusters_id(tmp_path: Path) -> None:
    dirs = _dirs(tmp_path, 1)
    write_meta_properties(dirs[0], MetaProperties(1, OTHER_CLUSTER))
    before = (dirs[0] / META_PROPERTIES_FILE).read_bytes()

    with pytest.raises(MetaPropertiesError, match=f"belongs to cluster {OTHER_CLUSTER}"):
        MetaPropertiesStore(dirs, 1).store(CLUSTER)

    assert (dirs[0] / META_PROPERTIES_FILE).read_bytes() == before


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("version=0\nbroker.id=1\ncluster.id=x\n", "version '0' is not supported"),
        ("version=1\nnode.id=one\ncluster.id=abc\n", "node.id 'one' is not a node id"),
        ("version=1\nnode.id=1\ncluster.id=has space\n", "is not a cluster id"),
        ("version=1\nnode.id=1\n", "cluster.id '' is not a cluster id"),
    ],
)
def test_a_damaged_file_is_refused_naming_the_file_and_the_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_text(text)

    with pytest.raises(MetaPropertiesError, match=problem) as raised:
        read_meta_properties(tmp_path)

    assert str(tmp_path) in str(raised.value)
