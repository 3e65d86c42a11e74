"""The planner: which work to queue and which lifecycle events an application reached."""

from cddlm.application.enactment import states as s


def tree(*rows):
    return s.build_tree(list(rows))


def leaf(path, observed, parent=None, pos=0, optional=False, once=False, type_="process"):
    return (path, type_, parent, pos, observed, optional, once)


def test_initialize_deploys_every_leaf_then_reports_deployed():
    roots = tree(leaf("a", "pending"), leaf("b", "pending", pos=1))
    p = s.plan("instantiated", "initialized", roots, set())
    assert p.work == [("a", "deploy"), ("b", "deploy")] and p.events == []
    p = s.plan("instantiated", "initialized", roots, {("a", "deploy"), ("b", "deploy")})
    assert p.work == []
    roots = tree(leaf("a", "deployed"), leaf("b", "deployed", pos=1))
    assert s.plan("instantiated", "initialized", roots, set()).events == ["deployed"]


def test_run_starts_only_once_everything_is_deployed():
    roots = tree(leaf("a", "deployed"), leaf("b", "pending", pos=1))
    p = s.plan("instantiated", "running", roots, set())
    assert ("a", "start") not in p.work and ("b", "deploy") in p.work
    roots = tree(leaf("a", "deployed"), leaf("b", "deployed", pos=1))
    p = s.plan("instantiated", "running", roots, set())
    assert p.events == ["deployed"] and set(p.work) == {("a", "start"), ("b", "start")}
    roots = tree(leaf("a", "running"), leaf("b", "running", pos=1))
    assert s.plan("initialized", "running", roots, set()).events == ["started"]


def test_sequence_waits_for_each_child_and_for_completion_of_one_shots():
    rows = [("q", "sequence", None, 0, "pending", False, False),
            leaf("q/init", "deployed", "q", 0, once=True), leaf("q/web", "deployed", "q", 1)]
    assert s.plan("initialized", "running", tree(*rows), set()).work == [("q/init", "start")]
    rows[1] = leaf("q/init", "running", "q", 0, once=True)
    assert s.plan("initialized", "running", tree(*rows), set()).work == []
    rows[1] = leaf("q/init", "completed", "q", 0, once=True)
    p = s.plan("initialized", "running", tree(*rows), set())
    assert p.work == [("q/web", "start")] and p.events == []
    rows[2] = leaf("q/web", "running", "q", 1)
    p = s.plan("initialized", "running", tree(*rows), set())
    assert p.events == ["started"] and p.derived["q"] == "running"


def test_parallel_starts_all_children_at_once():
    rows = [("p", "parallel", None, 0, "pending", False, False),
            leaf("p/a", "deployed", "p", 0), leaf("p/b", "deployed", "p", 1)]
    assert set(s.plan("initialized", "running", tree(*rows), set()).work) == {("p/a", "start"),
                                                                              ("p/b", "start")}


def test_failure_propagates_unless_optional():
    rows = [("c", "compound", None, 0, "pending", False, False),
            leaf("c/x", "failed", "c", 0), leaf("c/y", "running", "c", 1)]
    p = s.plan("running", "running", tree(*rows), set())
    assert p.events == ["failed"] and p.failure == "c/x"
    rows[1] = leaf("c/x", "failed", "c", 0, optional=True)
    p = s.plan("initialized", "running", tree(*rows), set())
    assert p.events == ["started"] and p.failure is None
    rows[0] = ("c", "compound", None, 0, "pending", True, False)   # an optional container
    rows[1] = leaf("c/x", "failed", "c", 0)
    rows.append(leaf("d", "running", None, 1))
    p = s.plan("initialized", "running", tree(*rows), set())
    assert p.failure is None and p.events == ["started"]


def test_failed_application_does_nothing_more_until_terminated():
    roots = tree(leaf("a", "failed"), leaf("b", "deployed", pos=1))
    p = s.plan("failed", "running", roots, set())
    assert p.work == [] and p.events == []


def test_terminate_stops_live_components_and_skips_those_never_deployed():
    roots = tree(leaf("a", "running"), leaf("b", "pending", pos=1), leaf("c", "failed", pos=2))
    p = s.plan("running", "terminated", roots, set())
    assert set(p.work) == {("a", "stop"), ("c", "stop")} and p.mark_stopped == ["b"]
    assert p.events == []
    roots = tree(leaf("a", "stopped"), leaf("b", "stopped", pos=1), leaf("c", "stopped", pos=2))
    assert s.plan("running", "terminated", roots, set()).events == ["stopped"]


def test_terminate_waits_for_an_in_flight_deploy():
    roots = tree(leaf("a", "pending"))
    p = s.plan("instantiated", "terminated", roots, {("a", "deploy")})
    assert p.mark_stopped == [] and p.events == []


def test_all_one_shots_completed_is_a_normal_end():
    roots = tree(leaf("a", "completed", once=True), leaf("b", "completed", pos=1, once=True))
    assert s.plan("initialized", "running", roots, set()).events == ["started", "stopped"]


def test_component_transitions_reject_stale_reports():
    assert s.component_next("running", "failed") == "failed"
    assert s.component_next("stopping", "failed") is None   # a planned stop is no failure
    assert s.component_next("stopped", "running") is None
    assert s.component_next("running", "restart") == "deployed"


def test_an_application_whose_every_leaf_failed_optionally_still_runs():
    # found by the generated descriptors (issue 17): every leaf below an optional compound that
    # failed; nothing counted, and the application waited in initialized for ever
    rows = [("c0", "compound", None, 0, "failed", True, False),
            ("c0/c0", "compound", "c0", 0, "running", True, False),
            leaf("c0/f1", "running", "c0", 1, type_="file"),
            leaf("c0/p2", "failed", "c0", 2, once=True)]
    p = s.plan("initialized", "running", tree(*rows), set())
    assert p.events == ["started"] and p.failure is None
    p = s.plan("instantiated", "running", tree(*rows), set())
    assert p.events[:1] == ["deployed"]


def test_a_deploy_that_finds_its_component_started_and_the_start_that_follows():
    """A host portal that runs its share as soon as it has it: the deploy reports a component
    starting or running (pending -> starting/running), and one left starting with no start
    queued gets the start that waits for it to run."""
    assert s.component_next("pending", "starting") == "starting"
    assert s.component_next("pending", "running") == "running"
    assert s.component_next("pending", "completed") == "completed"
    roots = tree(leaf("a", "running"), leaf("b", "starting", pos=1), leaf("c", "pending", pos=2))
    p = s.plan("instantiated", "running", roots, {("c", "deploy")})
    assert p.work == [] and p.events == []          # nothing starts before everything is deployed
    roots = tree(leaf("a", "running"), leaf("b", "starting", pos=1), leaf("c", "deployed", pos=2))
    p = s.plan("instantiated", "running", roots, set())
    assert p.events == ["deployed"] and set(p.work) == {("b", "start"), ("c", "start")}
    p = s.plan("initialized", "running", roots, {("b", "start")})    # its start under way
    assert p.work == [("c", "start")] and p.events == []
