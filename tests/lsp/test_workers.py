"""Renders sent ahead to a worker (`RenderWorkers.start`): the answer is taken later by the
sender, or abandoned; either way the worker goes back to the pool."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from kls.instances import load_instances
from kls.sandbox.workers import RenderWorkers
from tests.conftest import TEMPLATES


def test_started_render_answers_later_and_abandoned_one_frees_its_worker() -> None:
    spec = load_instances(TEMPLATES / "kls.toml").instances["sm90_bf16_4096_bias"]
    pool = RenderWorkers(keep=1, max_workers=1)
    try:
        pending = pool.start(spec)
        first = pending.result()
        assert first.ok and pending.result() is first  # taken once, kept
        pool.start(spec).abandon()  # superseded: nobody takes the answer
        with ThreadPoolExecutor(1) as wait:
            # With one worker, this render waits forever if the abandoned one kept it.
            again = wait.submit(pool.render, spec).result(timeout=30)
        assert again.text == first.text
        assert pool.size == 1
    finally:
        pool.close()


def test_a_spare_worker_follows_the_first_render_not_the_warm_up() -> None:
    spec = load_instances(TEMPLATES / "kls.toml").instances["sm90_bf16_4096_bias"]
    pool = RenderWorkers(keep=2, max_workers=4)
    try:
        pool.warm()
        time.sleep(0.2)
        assert pool.size == 1  # starting more would slow the server's own start
        assert pool.render(spec).ok
        deadline = time.monotonic() + 10
        while pool.size < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pool.size == 2  # an overlapping render will find a started worker
    finally:
        pool.close()
