import pytest

from cddlm.application import options as o
from cddlm.errors import BadArgument, NotUnderstood
from cddlm.xsdtypes import format_datetime, parse_duration, parse_time


def opt(name, kind="string", value="x", must=False):
    return o.Option(name, must, kind, value, str(value))


def test_empty_list_always_works():
    assert o.check([], "create") == {}


def test_unknown_options_are_ignored_unless_must_understand():
    assert o.check([opt("urn:x:unknown")], "create") == {}
    with pytest.raises(NotUnderstood) as e:
        o.check([opt("urn:x:unknown", must=True)], "create")
    assert e.value.option == "urn:x:unknown"


def test_option_understood_by_another_operation_only_is_not_understood_here():
    assert o.check([opt(o.VALIDATE_ONLY, "boolean", True)], "create") == {}
    with pytest.raises(NotUnderstood):
        o.check([opt(o.VALIDATE_ONLY, "boolean", True, must=True)], "create")
    assert o.VALIDATE_ONLY in o.check([opt(o.VALIDATE_ONLY, "boolean", True, must=True)], "initialize")


def test_duplicates_are_bad_even_if_unknown():
    with pytest.raises(BadArgument):
        o.check([opt("urn:x:a"), opt("urn:x:a")], "create")


def test_wrong_value_kind():
    with pytest.raises(BadArgument):
        o.check([opt(o.CLIENT_TOKEN, "integer", 3)], "create")


def test_every_catalog_option_is_listed():
    assert set(o.ALL) == set(o.CATALOG)
    assert all(uri.startswith("urn:cddlm:option:") for uri in o.ALL)


@pytest.mark.parametrize("text,seconds", [("PT1S", 1), ("PT1H30M", 5400), ("P1D", 86400),
                                          ("-PT5S", -5), ("PT0.5S", 0.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["P", "PT", "1H", "PTxS", ""])
def test_bad_durations(text):
    with pytest.raises(BadArgument):
        parse_duration(text)


def test_times_absolute_and_relative():
    assert parse_time("PT10S", 1000.0) == 1010.0
    assert parse_time("2026-01-01T00:00:00Z", 0) == 1767225600.0
    assert parse_time(format_datetime(1767225600.25), 0) == 1767225600.25
    with pytest.raises(BadArgument):
        parse_time("next tuesday", 0)
