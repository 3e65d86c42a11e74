"""The dashboard's tests share one browser (Playwright's sync API allows one at a time): the
session's ``browser`` fixture is registered once for the whole suite in tests/conftest.py, so
that tests elsewhere (tests/multihost) use the same one."""
