"""Run a worker on several threads and surface the first failure in the test's thread."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_threads(worker: Callable[[int], None], count: int = 8) -> None:
    """Call worker(i) for i in range(count), each on its own thread; re-raise the first error.

    A failed assert inside a thread would otherwise only be printed, never fail the test.
    """
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            worker(i)
        except BaseException as exc:  # handed to the test's thread below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
