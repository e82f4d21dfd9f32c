"""The per-shape dispatch: one configuration per M bucket of the tuned shapes.

One configuration cannot serve 128 tokens and 8192 alike, so beside the single winner a tune
judges each bucket on its own shapes. The buckets follow the tuned M values in order: the
first holds every M up to the smallest tuned M, each next one the M values above the last
bucket's up to its own, and the last has no upper bound. Each bucket's configuration is the
one with the best geometric mean of cuBLAS time / its time over the bucket's shapes (stage 2
times every chosen op with every runtime setting on every shape, so each bucket draws from
the same measurements as the winner). `--apply` writes each as an instance of its own
(kls.tune.apply.apply_dispatch), which keeps Inductor's single-op calling convention: the
caller picks the instance whose bucket holds its M.

With `dispatch = "mn"`, each N of a bucket's shapes is judged on its own too, and where another
configuration is more than N_MARGIN faster on that N's shapes than the bucket's, it gets an
instance of its own (the caller takes it for that N, and the M bucket's for any other N): one
configuration cannot serve N = 4096 and N = 14336 at 128 tokens alike either. Within the
margin, timing spread would decide, and an instance more would serve no one.
"""

from __future__ import annotations

from kls.instances import InstanceSpec
from kls.tune.apply import Bucket
from kls.tune.results import BucketChoice, Choice, TuneResult, geomean

# An N's own configuration must beat the bucket's there by more than this (the dispatch's
# goal allows 2 % behind the per-shape best).
N_MARGIN = 0.02


def m_of(shape: str) -> int:
    return int(shape.split("x")[0])


def n_of(shape: str) -> int:
    return int(shape.split("x")[1])


def buckets(keys: list[str]) -> list[tuple[int, int | None, list[str]]]:
    """(m_above, m_upto, shapes) of each bucket, in M order (m_upto None: unbounded)."""
    ms = sorted({m_of(k) for k in keys})
    out: list[tuple[int, int | None, list[str]]] = []
    above = 0
    for i, m in enumerate(ms):
        upto = m if i < len(ms) - 1 else None
        out.append((above, upto, [k for k in keys if m_of(k) == m]))
        above = m
    return out


def bucket_choices(
    choices: list[Choice], keys: list[str], by_n: bool = False
) -> list[BucketChoice]:
    """The best configuration of each bucket among `choices` (stage 2's, each with its
    per-shape ratios); a bucket no configuration was verified on every shape of is left out.
    `by_n` ("mn"): then each N of a bucket whose own best beats the bucket's there (or that
    has a best where the bucket has none). Nothing to dispatch on (one M, and one N where
    `by_n`): empty."""
    if len({m_of(k) for k in keys}) < 2 and not (by_n and len({n_of(k) for k in keys}) > 1):
        return []
    out: list[BucketChoice] = []
    for above, upto, shapes in buckets(keys):
        best = _best_over(choices, shapes)
        if best is not None:
            out.append(BucketChoice(above, upto, shapes, best))
        ns = sorted({n_of(k) for k in shapes})
        for n in ns if by_n and (len(ns) > 1 or best is None) else []:
            of_n = [k for k in shapes if n_of(k) == n]
            own = _best_over(choices, of_n)
            if own is not None and _wins_its_n(own, best, of_n):
                out.append(BucketChoice(above, upto, of_n, own, n))
    return out


def _wins_its_n(own: Choice, bucket: Choice | None, shapes: list[str]) -> bool:
    """Whether an N's best earns an instance: the bucket has none verified on every shape,
    or the N's best is more than N_MARGIN faster than the bucket's on that N's shapes."""
    if bucket is None:
        return True
    theirs = geomean([bucket.per_shape[k] for k in shapes])
    return own.geomean_vs_cublas is not None and (
        theirs is None or own.geomean_vs_cublas > theirs * (1 + N_MARGIN)
    )


def _best_over(choices: list[Choice], shapes: list[str]) -> Choice | None:
    """The choice with the best geometric mean over `shapes`, among those verified on all."""
    ranked: list[Choice] = []
    for c in choices:
        if any(c.per_shape.get(k) is None for k in shapes):
            continue
        per = {k: c.per_shape[k] for k in shapes}
        ranked.append(Choice(c.unit, c.op, dict(c.vars), geomean(list(per.values())), per))
    return max(ranked, key=lambda c: c.geomean_vs_cublas or 0.0) if ranked else None


def bucket_text(bucket: BucketChoice) -> str:
    """`M <= 128`, `128 < M <= 2048`, `M > 2048`; `, N = 4096` for an N's own."""
    n = "" if bucket.n is None else f", N = {bucket.n}"
    if bucket.m_upto is None:
        return f"M > {bucket.m_above}{n}" if bucket.m_above else f"any M{n}"
    if bucket.m_above == 0:
        return f"M <= {bucket.m_upto}{n}"
    return f"{bucket.m_above} < M <= {bucket.m_upto}{n}"


def bucket_instance(instance: str, bucket: BucketChoice) -> str:
    """The name of the bucket's instance: the base's, then `_m` and the bucket's tuned M, and
    `_n` and its N for an N's own."""
    n = "" if bucket.n is None else f"_n{bucket.n}"
    return f"{instance}_m{m_of(bucket.shapes[0])}{n}"


def buckets_to_write(dispatch: list[BucketChoice]) -> list[BucketChoice]:
    """The buckets that need an instance of their own: all but a bucket of every M and N (a
    tune of one M dispatching on N alone), whose configuration is the winner `--apply` writes
    into the instance itself."""
    return [b for b in dispatch if not (b.n is None and b.m_above == 0 and b.m_upto is None)]


def buckets_to_apply(result: TuneResult, spec: InstanceSpec) -> list[Bucket]:
    """What `--apply` writes for the result's dispatch: each bucket's instance, op, build and
    runtime variables, and the op list level to name it with."""
    from kls.tune.apply import level_to_write

    builds = {b.unit: b for b in result.builds}
    out = []
    for bucket in buckets_to_write(result.dispatch):
        unit = builds[bucket.choice.unit]
        level = level_to_write(bucket.choice.op, unit.level, spec.instantiation_level, spec.arch)
        out.append(
            Bucket(
                bucket_instance(spec.name, bucket),
                bucket_text(bucket),
                m_of(bucket.shapes[0]),
                bucket.choice.op,
                {**unit.build_vars, **bucket.choice.vars},
                level,
                bucket.n,
            )
        )
    return out
