"""``brook users`` against a real controller: passwords from stdin or a file (never the
command line), credentials that verify them, listing, deletion, and Kafka's errors."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_fixture import ClusterFactory, metadata_image

from brook.launcher import LocalCluster
from brook.security.scram import verify_password
from brook.v1 import metadata_pb2

pytestmark = pytest.mark.integration

BROOK = str(Path(sys.executable).with_name("brook"))
COMMAND_TIMEOUT_S = 60
SHA256 = metadata_pb2.SCRAM_MECHANISM_SCRAM_SHA_256
SHA512 = metadata_pb2.SCRAM_MECHANISM_SCRAM_SHA_512


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    factory = ClusterFactory(tmp_path_factory.mktemp("users-cli"))
    try:
        yield factory(controllers=1, storage_nodes=0, group_coordinators=0, gateways=0)
    finally:
        factory.close(keep_files=False)


def _users(
    cluster: LocalCluster, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BROOK, "users", *args, "--bootstrap-server", cluster.controller_bootstrap_servers],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def _stored(cluster: LocalCluster, user: str) -> dict[int, metadata_pb2.UserScramCredentialRecord]:
    image = metadata_image(cluster)
    assert image is not None, "no controller answered"
    return {m: r for (name, m), r in image.scram_credentials.items() if name == user}


def test_users_are_added_from_stdin_or_a_file_listed_and_deleted(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    added = _users(cluster, "add", "--user", "alice", "--password-stdin", stdin="s3cret\n")
    assert added.returncode == 0, added.stderr
    assert "alice" in added.stdout
    stored = _stored(cluster, "alice")
    assert set(stored) == {SHA256, SHA512}, "both mechanisms by default"
    assert all(verify_password(record, "s3cret") for record in stored.values())

    password_file = tmp_path / "bob.password"
    password_file.write_text("from a file\nignored second line\n")
    added = _users(
        cluster,
        "add",
        "--user",
        "bob",
        "--mechanism",
        "SCRAM-SHA-256",
        "--iterations",
        "4096",
        "--password-file",
        str(password_file),
    )
    assert added.returncode == 0, added.stderr
    assert verify_password(_stored(cluster, "bob")[SHA256], "from a file")

    listed = _users(cluster, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    users = {u["user"]: u["credentials"] for u in json.loads(listed.stdout)["users"]}
    assert users["alice"] == [
        {"mechanism": "SCRAM-SHA-256", "iterations": 8192},
        {"mechanism": "SCRAM-SHA-512", "iterations": 8192},
    ]
    assert users["bob"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]
    table = _users(cluster, "list", "--user", "bob")
    assert table.stdout.split("\n")[1].split() == ["bob", "SCRAM-SHA-256", "4096"]
    assert "salt" not in listed.stdout.lower()

    deleted = _users(cluster, "delete", "--user", "alice")
    assert deleted.returncode == 0, deleted.stderr
    assert _stored(cluster, "alice") == {}
    gone = _users(cluster, "list", "--user", "alice")
    assert gone.returncode == 1
    assert "RESOURCE_NOT_FOUND" in gone.stderr


def test_a_password_is_never_taken_from_the_command_line_nor_guessed(
    cluster: LocalCluster,
) -> None:
    on_command_line = _users(cluster, "add", "--user", "carol", "--password", "pw")
    assert on_command_line.returncode == 2
    no_terminal = _users(cluster, "add", "--user", "carol")
    assert no_terminal.returncode == 2
    assert "--password-stdin" in no_terminal.stderr
    empty = _users(cluster, "add", "--user", "carol", "--password-stdin", stdin="\n")
    assert empty.returncode == 2
    assert "empty" in empty.stderr
    assert _stored(cluster, "carol") == {}


def test_the_clusters_refusals_exit_1_and_change_nothing(cluster: LocalCluster) -> None:
    too_few = _users(
        cluster, "add", "--user", "dave", "--iterations", "100", "--password-stdin", stdin="pw\n"
    )
    assert too_few.returncode == 1
    assert "UNACCEPTABLE_CREDENTIAL" in too_few.stderr
    missing = _users(cluster, "delete", "--user", "dave", "--mechanism", "SCRAM-SHA-512")
    assert missing.returncode == 1
    assert "RESOURCE_NOT_FOUND" in missing.stderr
    assert _stored(cluster, "dave") == {}
