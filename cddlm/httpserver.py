"""Running a waitress server on a thread, and stopping it cleanly.

waitress's loop ``select()``s on its sockets; closing them under a running loop makes that
``select()`` fail on a closed descriptor. So ``stop`` first empties the loop's socket map and
wakes it (it then ends by itself), joins the thread, and only then closes the sockets and the
connections still open (clients keep connections alive).
"""

from __future__ import annotations

import threading


def start(server, name: str) -> threading.Thread:
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    return thread


def stop(server, thread: threading.Thread | None = None, timeout: float = 5.0) -> None:
    server.task_dispatcher.shutdown(cancel_pending=True, timeout=timeout)
    dispatchers = list(server._map.values())
    server._map.clear()
    try:
        server.trigger.pull_trigger()   # the loop sees an empty map and returns
    except OSError:
        pass
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)
    for dispatcher in dispatchers:
        try:
            dispatcher.close()
        except OSError:
            pass
