"""The engine's cache of component trees (issue 11): bounded in nodes, never evicting a tree in
use."""

from __future__ import annotations

from cddlm.application.enactment.engine import _Trees


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _found(nodes: int) -> tuple[object, dict]:
    return object(), {"c%d" % i: None for i in range(nodes)}


def test_trees_not_in_use_go_least_recently_used_first_while_too_many_nodes_are_held():
    clock = Clock()
    trees = _Trees(nodes=150, in_use=10, clock=clock)
    a, b, c = _found(100), _found(40), _found(30)
    trees.put("a", 1, a)
    trees.put("b", 1, b)
    clock.now = 5
    assert trees.get("a", 1) is a          # a is now the more recently used
    clock.now = 20
    trees.put("c", 1, c)                   # 170 nodes: b, unused for 20 s, goes first
    assert trees.get("b", 1) is None
    assert trees.get("a", 1) is a and trees.get("c", 1) is c
    assert trees.nodes == 130


def test_a_tree_in_use_is_kept_whatever_the_size():
    clock = Clock()
    trees = _Trees(nodes=50, in_use=10, clock=clock)
    big, other = _found(1000), _found(1000)
    trees.put("big", 3, big)
    clock.now = 9
    trees.put("other", 1, other)           # both used within 10 s: both kept
    assert trees.get("big", 3) is big and trees.get("other", 1) is other
    assert trees.nodes == 2000
    clock.now = 30
    trees.put("small", 1, _found(10))       # now neither is in use: they go
    assert trees.get("big", 3) is None and trees.get("other", 1) is None
    assert trees.nodes == 10


def test_generations_are_kept_apart_and_a_destroyed_application_forgotten():
    trees = _Trees(nodes=10_000, in_use=10, clock=Clock())
    old, new = _found(5), _found(7)
    trees.put("a", 2, new)
    trees.put("a", 1, old)                 # a reader still holding an older row
    assert trees.get("a", 1) is old and trees.get("a", 2) is new
    again = _found(3)
    trees.put("a", 2, again)               # built again: replaces it, and its nodes
    assert trees.get("a", 2) is again and trees.nodes == 8
    trees.put("b", 1, _found(4))
    trees.forget("a")
    assert trees.get("a", 1) is None and trees.get("a", 2) is None
    assert trees.nodes == 4
