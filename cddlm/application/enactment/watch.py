"""Exit watcher: one thread that learns within milliseconds when a watched process ends,
through Linux pidfds (which work for adopted processes too, not only for children)."""

from __future__ import annotations

import os
import select
import threading
from typing import Callable


class ExitWatcher:
    def __init__(self, on_exit: Callable[[object], None]):
        self._on_exit = on_exit
        self._poll = select.poll()
        self._fds: dict[int, tuple[int, object]] = {}    # fd -> (pid, key)
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._poll.register(self._wake_r, select.POLLIN)
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="cddlm-exit-watcher", daemon=True)
        self._thread.start()

    def watch(self, pid: int, key: object) -> bool:
        try:
            fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            return False   # already gone, or no pidfd support: the scheduled check finds it
        with self._lock:
            self._fds[fd] = (pid, key)
            self._poll.register(fd, select.POLLIN)
        os.write(self._wake_w, b"x")
        return True

    def _run(self) -> None:
        while not self._stop:
            try:
                ready = self._poll.poll(1000)
            except InterruptedError:
                continue
            for fd, _ in ready:
                if fd == self._wake_r:
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                    continue
                with self._lock:
                    entry = self._fds.pop(fd, None)
                    try:
                        self._poll.unregister(fd)
                    except KeyError:
                        pass
                os.close(fd)
                if entry is not None:
                    try:
                        self._on_exit(entry[1])
                    except Exception:  # a failing callback must not kill the watcher
                        import logging
                        logging.getLogger(__name__).exception("exit callback failed")

    def close(self) -> None:
        self._stop = True
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=2)
        with self._lock:
            for fd in list(self._fds):
                os.close(fd)
            self._fds.clear()
        os.close(self._wake_r)
        os.close(self._wake_w)
