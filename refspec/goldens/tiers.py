"""Tiers of a sweep (docs/sweeps.md, "Tiers"): a seeded, capped subsample of each block, with
``cover`` guaranteeing that every value (or value combination) of the listed axes appears.

A tier ranks a block's cases by SHA-256 of the tier's seed, its name and the case id, takes the
first case in rank order that brings a new covered value until every one is covered, then the
remaining cases in rank order up to ``cap``; the result keeps the block's product order. A block
may override a tier (``[block.tiers.NAME]``: its own cap and cover, or ``"all"``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .. import ops
from .constraints import SweepError

__all__ = ["Tier", "TIER_KEYS", "parse_tier", "subsample"]

TIER_KEYS = ("cap", "cover", "seed", "description")


def _rank(tier_seed: int, tier: str, case_id: str) -> int:
    digest = hashlib.sha256(f"tier:{int(tier_seed)}:{tier}:{case_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


@dataclass
class Tier:
    name: str
    cap: int | None = None
    cover: tuple | None = None          # None: not given (a block override inherits the tier's)
    seed: int | None = None
    description: str = ""
    every: bool = False      # a block override "all": the block's every case


def parse_tier(name: str, spec, where: str, block: bool = False) -> Tier:
    if block and spec == "all":
        return Tier(name, None, None, None, "every case of the block", every=True)
    if isinstance(spec, int) and not isinstance(spec, bool) and block:
        spec = {"cap": spec}
    if not isinstance(spec, dict):
        raise SweepError(f"{where}: must be a table with cap/cover/seed"
                         + (", a cap, or \"all\"" if block else ""))
    unknown = sorted(set(spec) - set(TIER_KEYS))
    if unknown:
        raise SweepError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(TIER_KEYS)}")
    cap = spec.get("cap")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
        raise SweepError(f"{where}: cap {cap!r} must be an integer >= 0")
    cover = [] if "cover" in spec else None
    every_axis = {a for op in ops.OPERATORS.values() for a in op.sweep.names} | {"shape"}
    for entry in spec.get("cover", []):
        group = tuple(entry) if isinstance(entry, list) else (entry,)
        for a in group:
            if a not in every_axis:
                raise SweepError(f"{where}: cover names unknown axis {a!r}; axes: "
                                 f"{', '.join(sorted(every_axis))}")
        cover.append(group)
    seed = spec.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise SweepError(f"{where}: seed {seed!r} must be an integer")
    return Tier(name, cap, None if cover is None else tuple(cover), seed,
                str(spec.get("description", "")))


def _cover_key(params: dict, shape_label: str, group: tuple):
    return tuple(shape_label if a == "shape" else params.get(a) for a in group)


def subsample(block, tier: Tier, sweep_seed: int) -> list[str]:
    """The ids a tier takes from a block (a ``refspec.goldens.sweep.Block``): every value combination of each ``cover`` group at
    least once (first case in hash-rank order that brings something new), then the remaining
    cases in rank order up to ``cap``; returned in the block's product order."""
    over = block.tier_overrides.get(tier.name)
    if over is not None and over.every:
        return [cid for cid, _ in block.cases]
    cap = over.cap if over is not None and over.cap is not None else tier.cap
    cover = over.cover if over is not None and over.cover is not None else (tier.cover or ())
    seed = tier.seed if tier.seed is not None else sweep_seed
    ids = [cid for cid, _ in block.cases]
    if cap is None and not cover:
        return ids
    if cap == 0:
        return []
    params = dict(block.cases)
    axes = ops.get(block.op).sweep.names
    groups = [g for g in cover if all(a in axes or a == "shape" for a in g)]
    ranked = sorted(ids, key=lambda cid: _rank(seed, tier.name, cid))
    chosen, covered = set(), set()
    if groups:
        keys = {cid: {(i, _cover_key(params[cid], cid.rsplit("/", 1)[-1], g))
                      for i, g in enumerate(groups)} for cid in ids}
        every = set().union(*keys.values())
        for cid in ranked:
            if not keys[cid] <= covered:
                chosen.add(cid)
                covered |= keys[cid]
                if len(covered) == len(every):
                    break
    if cap is not None and len(chosen) > cap:
        raise SweepError(f"{block.source}: block {block.name!r}: tier {tier.name!r} needs "
                         f"{len(chosen)} cases to cover {', '.join('+'.join(g) for g in groups)} "
                         f"but its cap is {cap}; raise the cap or cover less")
    for cid in ranked:
        if cap is not None and len(chosen) >= cap:
            break
        chosen.add(cid)
    return [cid for cid in ids if cid in chosen]
