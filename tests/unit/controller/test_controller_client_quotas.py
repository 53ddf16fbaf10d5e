"""Client quotas through AdminService, against a real (single-voter) controller: validation
refuses a bad entry whole, valid entries commit ClientQuotaRecords into every image, and
DescribeClientQuotas filters as Kafka's does."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from controller_support import InProcessController

from brook.cli import main
from brook.client.admin import Admin
from brook.client.quotas import ClientQuotaEntity, ClientQuotaFilterComponent
from brook.errors import ErrorCode

ALICE = ClientQuotaEntity({"user": "alice"})
ALICE_LOADER = ClientQuotaEntity({"user": "alice", "client-id": "loader"})
DEFAULT_CLIENT = ClientQuotaEntity({"client-id": None})
LOADER = ClientQuotaEntity({"client-id": "loader"})


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessController]:
    with InProcessController(tmp_path_factory.mktemp("controller")) as running:
        yield running


@pytest.fixture
def admin(controller: InProcessController) -> Iterator[Admin]:
    with Admin(controller.address, default_api_timeout_ms=10_000) as client:
        yield client
        # Each test starts without quotas.
        every = client.describe_client_quotas()
        client.alter_client_quotas({e: dict.fromkeys(v) for e, v in every.items()})


@pytest.mark.parametrize(
    ("entity", "ops", "fragment"),
    [
        (ALICE, {"producer_byte_rates": 1.0}, "unknown quota key 'producer_byte_rates'"),
        (ALICE, {"producer_byte_rate": -1.0}, "must be a positive finite number"),
        (ALICE, {"consumer_byte_rate": 0.0}, "must be a positive finite number"),
        (ALICE, {"producer_byte_rate": 1.5}, "whole bytes per second"),
        (ClientQuotaEntity({"ip": "10.0.0.1"}), {"request_percentage": 50.0}, "'ip'"),
        (ClientQuotaEntity({"user": ""}), {"request_percentage": 50.0}, "name is empty"),
        (ClientQuotaEntity({}), {"request_percentage": 50.0}, "entity is empty"),
    ],
)
def test_an_invalid_entry_is_refused_with_invalid_request_and_changes_nothing(
    controller: InProcessController,
    admin: Admin,
    entity: ClientQuotaEntity,
    ops: dict[str, float | None],
    fragment: str,
) -> None:
    # The valid key beside the bad one is not applied either.
    result = admin.alter_client_quotas({entity: {"request_percentage": 10.0, **ops}, LOADER: {}})

    error = result[entity]
    assert error is not None and error.code == ErrorCode.INVALID_REQUEST
    assert fragment in str(error)
    assert result[LOADER] is None
    assert admin.describe_client_quotas() == {}
    assert controller.image().client_quotas == {}


def test_quotas_are_set_changed_and_removed_per_key(
    controller: InProcessController, admin: Admin
) -> None:
    assert admin.alter_client_quotas(
        {
            ALICE_LOADER: {"producer_byte_rate": 1048576, "request_percentage": 25.5},
            DEFAULT_CLIENT: {"consumer_byte_rate": 2e6},
        }
    ) == {ALICE_LOADER: None, DEFAULT_CLIENT: None}
    assert admin.alter_client_quotas(
        {ALICE_LOADER: {"producer_byte_rate": 2048, "request_percentage": None}}
    ) == {ALICE_LOADER: None}

    assert admin.describe_client_quotas() == {
        DEFAULT_CLIENT: {"consumer_byte_rate": 2e6},
        ALICE_LOADER: {"producer_byte_rate": 2048},
    }
    assert controller.image().client_quotas == {
        (("client-id", None),): {"consumer_byte_rate": 2e6},
        (("client-id", "loader"), ("user", "alice")): {"producer_byte_rate": 2048},
    }


def test_validate_only_checks_without_committing(admin: Admin) -> None:
    assert admin.alter_client_quotas({ALICE: {"producer_byte_rate": 1e6}}, validate_only=True) == {
        ALICE: None
    }
    refused = admin.alter_client_quotas({ALICE: {"producer_byte_rate": -1}}, validate_only=True)
    assert refused[ALICE] is not None
    assert admin.describe_client_quotas() == {}


def test_describe_filters_by_exact_default_and_any_name_with_strict(admin: Admin) -> None:
    admin.alter_client_quotas(
        {
            entity: {"request_percentage": 50.0}
            for entity in (ALICE, ALICE_LOADER, DEFAULT_CLIENT, LOADER)
        }
    )
    exact = ClientQuotaFilterComponent.of_entity
    any_client = ClientQuotaFilterComponent.of_entity_type("client-id")

    assert set(admin.describe_client_quotas([exact("user", "alice")])) == {ALICE, ALICE_LOADER}
    assert set(admin.describe_client_quotas([exact("user", "alice")], strict=True)) == {ALICE}
    assert set(admin.describe_client_quotas([any_client])) == {
        ALICE_LOADER,
        DEFAULT_CLIENT,
        LOADER,
    }
    assert set(admin.describe_client_quotas([any_client], strict=True)) == {DEFAULT_CLIENT, LOADER}
    assert set(
        admin.describe_client_quotas([ClientQuotaFilterComponent.of_default_entity("client-id")])
    ) == {DEFAULT_CLIENT}
    assert admin.describe_client_quotas([], strict=True) == {}


@pytest.mark.parametrize(
    "components",
    [
        [ClientQuotaFilterComponent("ip", "any")],
        [ClientQuotaFilterComponent("user", "exact")],
        [ClientQuotaFilterComponent("user", "default", "alice")],
        [ClientQuotaFilterComponent.of_entity_type("user")] * 2,
    ],
)
def test_a_malformed_filter_is_refused_with_invalid_request(
    admin: Admin, components: list[ClientQuotaFilterComponent]
) -> None:
    with pytest.raises(Exception) as raised:
        admin.describe_client_quotas(components)
    assert getattr(raised.value, "code", None) == ErrorCode.INVALID_REQUEST


def test_brook_configs_sets_describes_and_deletes_quotas_like_kafka_configs(
    controller: InProcessController, admin: Admin, capsys: pytest.CaptureFixture[str]
) -> None:
    def brook(*args: str) -> int:
        return main(["configs", "--bootstrap-server", controller.address, *args])

    alice_default_client = (
        "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
        "--entity-default",
    )  # fmt: skip
    assert brook(*alice_default_client, "--add-config", "producer_byte_rate=1048576") == 0
    assert brook("--entity-type", "clients", "--entity-name", "loader", "--add-config",
                 "consumer_byte_rate=2048,request_percentage=50") == 0  # fmt: skip
    assert admin.describe_client_quotas() == {
        ClientQuotaEntity({"user": "alice", "client-id": None}): {"producer_byte_rate": 1048576},
        LOADER: {"consumer_byte_rate": 2048, "request_percentage": 50},
    }
    capsys.readouterr()

    assert brook("--entity-type", "clients") == 0
    assert capsys.readouterr().out == (
        "Quota configs for client-id 'loader' are consumer_byte_rate=2048.0,"
        "request_percentage=50.0\n"
    )
    assert brook(*alice_default_client, "--json") == 0
    assert json.loads(capsys.readouterr().out) == {
        "entities": [
            {
                "entity": {"client-id": None, "user": "alice"},
                "quotas": {"producer_byte_rate": 1048576.0},
            }
        ]
    }
    refused = brook("--entity-type", "users", "--entity-name", "bob", "--add-config", "x=1")
    assert refused == 1 and "INVALID_REQUEST" in capsys.readouterr().err
    assert brook("--entity-type", "clients", "--entity-name", "loader", "--delete-config",
                 "consumer_byte_rate") == 0  # fmt: skip
    assert admin.describe_client_quotas(
        [ClientQuotaFilterComponent.of_entity_type("client-id")], strict=True
    ) == {LOADER: {"request_percentage": 50}}
    # An entity named without a name or default cannot be altered.
    assert brook("--entity-type", "users", "--add-config", "producer_byte_rate=1") == 2
