"""The dashboard's tests share one browser (Playwright's sync API allows one at a time)."""

from tests.web.browser import browser  # noqa: F401  (the session's fixture, for every module here)
