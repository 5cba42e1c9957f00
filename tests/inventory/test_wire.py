"""Queued requests across versions of the shop: a request of this version, as its buyers write it, still
decodes; one a holder cannot read whole is refused, never cut short; and no version's holder takes
another's requests (tests/orders/test_wire_versions.py runs a holder of other code beside buyers)."""

from datetime import UTC, datetime

import msgspec
import msgspec.inspect
import pytest

from inventory.batching import Batch
from inventory.locks import wire
from inventory.services import ReservationLine, StockLine, _ReserveRequest
from orders.services.placing_wire import PlaceRequest

# Requests as this version's buyers write them. If these no longer match, their shape changed: bump
# WIRE_VERSION (inventory/locks/wire.py) and write the new shape here.
RESERVE = b'["2030-01-02T03:04:05Z",[["HOT",11,7,2]]]'
PLACE = (
    b'{"customer_id":null,"email":"b@example.com","scope":"email:b@example.com","buyer":"email:b@example.com",'
    b'"client_address":"10.0.0.1","idempotency_key":"k","key_hash":"h","fingerprint":"f",'
    b'"lines":[{"sku":"HOT","quantity":2}],"shipping_address":null,"billing_address":null,'
    b'"shipping_method_id":null,"voucher_code":"DROP20","given":{},"hold_seconds":0}'
)
RESERVE_REQUEST = _ReserveRequest(datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC), (ReservationLine("HOT", 11, 7, 2),))
PLACE_REQUEST = PlaceRequest(
    customer_id=None,
    email="b@example.com",
    scope="email:b@example.com",
    buyer="email:b@example.com",
    client_address="10.0.0.1",
    idempotency_key="k",
    key_hash="h",
    fingerprint="f",
    lines=(StockLine(sku="HOT", quantity=2),),
    voucher_code="DROP20",
)


@pytest.mark.parametrize(
    ("body", "request_type", "queued"),
    [(RESERVE, _ReserveRequest, RESERVE_REQUEST), (PLACE, PlaceRequest, PLACE_REQUEST)],
    ids=["reserve", "place"],
)
def test_a_request_of_this_version_as_its_buyers_write_it_still_decodes(body, request_type, queued):
    assert wire.decode(body, request_type) == queued
    assert wire.encode(queued) == body


@pytest.mark.parametrize(
    ("body", "request_type"),
    [
        pytest.param(RESERVE.replace(b"]]]", b"]],3600]"), _ReserveRequest, id="reserve-one-more-item"),
        pytest.param(RESERVE.replace(b"2]]]", b"2,true]]]"), _ReserveRequest, id="reserve-line-one-more-item"),
        pytest.param(PLACE.replace(b"}", b',"gift":true}'), PlaceRequest, id="place-one-more-field"),
        pytest.param(PLACE.replace(b'"quantity":2', b'"quantity":2,"gift":true'), PlaceRequest, id="line-one-more"),
        pytest.param(PLACE.replace(b'"given":{}', b'"given":{"gift":"x"}'), PlaceRequest, id="place-unknown-given"),
    ],
)
def test_a_request_with_more_than_the_holder_knows_is_malformed_not_cut_short(body, request_type):
    with pytest.raises(wire.Malformed):
        wire.decode(body, request_type)


def _types_within(info: msgspec.inspect.Type):
    """``info`` and every type it holds (fields, items, keys, union members)."""
    yield info
    for name in info.__struct_fields__:
        value = getattr(info, name)
        for held in value if isinstance(value, tuple) else (value,):
            held = held.type if isinstance(held, msgspec.inspect.Field) else held
            if isinstance(held, msgspec.inspect.Type):
                yield from _types_within(held)


def test_every_type_a_queued_request_is_read_into_refuses_fields_it_does_not_know():
    """A dataclass, a NamedTuple or a lax Struct would drop them: a holder would serve the request half."""
    batches = {batch.kind: batch for batch in Batch.__subclasses__()}
    assert {"reserve", "place"} <= set(batches)
    for batch in batches.values():
        for info in _types_within(msgspec.inspect.type_info(batch.request_type)):
            assert not isinstance(info, msgspec.inspect.DataclassType | msgspec.inspect.NamedTupleType), batch.kind
            assert not isinstance(info, msgspec.inspect.TypedDictType), batch.kind
            if isinstance(info, msgspec.inspect.StructType):
                assert info.forbid_unknown_fields, (batch.kind, info.cls)


def test_no_version_takes_the_requests_of_another_nor_untagged_ones(monkeypatch):
    tags = {}
    for version in (1, 2, 12):
        monkeypatch.setattr(wire, "WIRE_VERSION", version)
        tags[version] = wire.request_tag("place")
    requests = [tag + b"{}" for tag in tags.values()] + [b"place{}"]  # the last as queued before versions
    for tag in [*tags.values(), b"place"]:  # the last: a holder from before versions
        assert [request for request in requests if request.startswith(tag)] == [tag + b"{}"]
