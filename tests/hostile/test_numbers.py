"""Numbers a caller gives that no count, offset, index or time is: thousands of digits (past
what int() reads, 4,300), or a duration that ends past the year 9999 (where no time can be
written). Each is a clear fault that changes nothing, never an internal error, nor an
application whose properties fail for ever after."""

from __future__ import annotations

from tests.hostile.test_references import resolve, sleeper  # noqa: F401


def test_a_list_index_or_a_count_of_thousands_of_digits_is_a_clear_fault(portal, sleeper):
    p, app = portal, sleeper
    a = resolve(p, app, "w/argv/" + "9" * 5000)
    assert a.fault() == "ResolutionFault", a.data[:500]
    assert "w/argv is a list of 2 items" in a.description()
    for asked in ("<ext:offset>%s</ext:offset>" % ("9" * 5000), "<ext:lines>%s</ext:lines>" % ("9" * 5000)):
        a = p.post(app, "<ext:logsRequest><ext:component>w</ext:component>%s</ext:logsRequest>" % asked)
        assert a.fault() == "BadArgumentFault", a.data[:500]
        assert "is too large (more than 18 digits)" in a.description(), a.description()
    a = p.post(p.url, "<ext:listApplications><ext:limit>%s</ext:limit></ext:listApplications>"
               % ("1" * 5000))
    assert a.fault() == "BadArgumentFault", a.data[:500]
    # the largest offset a file may have is still an offset (past the end: nothing yet)
    a = p.post(app, "<ext:logsRequest><ext:component>w</ext:component>"
                    "<ext:offset>999999999999999999</ext:offset></ext:logsRequest>")
    assert a.fault() is None, a.data[:500]
    assert p.state_of(app) == "running"
    assert "ValueError" not in p.log_text()


def test_a_termination_time_past_the_year_9999_is_refused(portal):
    p = portal
    for duration, says in (("P9999Y", "past the year 9999"), ("P%sD" % ("9" * 5000), "longer than any time")):
        option = ("<api:options><api:option name='urn:cddlm:option:termination-time'><api:string>%s"
                  "</api:string></api:option></api:options>" % duration)
        a = p.post(p.url, "<api:createRequest>%s</api:createRequest>" % option)
        assert a.fault() == "BadArgumentFault" and says in a.description(), a.data[:500]
    app = p.create()
    a = p.post(app, "<wsrf-rl:SetTerminationTime xmlns:wsrf-rl='http://docs.oasis-open.org/wsrf/rl-2'>"
                    "<wsrf-rl:RequestedLifetimeDuration>P9999Y</wsrf-rl:RequestedLifetimeDuration>"
                    "</wsrf-rl:SetTerminationTime>")
    assert a.fault() == "BadArgumentFault", a.data[:500]
    a = p.post(app, "<wsrf-rp:GetResourcePropertyDocument/>")
    assert a.fault() is None, a.data[:500]          # the view is as it was
    assert "ValueError" not in p.log_text() and "OverflowError" not in p.log_text()
