"""One colour per method and one line style per staleness, shared by every figure."""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: figures are files, never windows

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from analysis.core.cells import split_variant  # noqa: E402

# The four compared methods first, then the ablations the sweeps name (experiments/sweeps.yaml),
# then the peer methods (the `peers` sweep).
_DEEP = sns.color_palette("deep", 10).as_hex()
_DARK = sns.color_palette("dark", 10).as_hex()
KNOWN_METHOD_COLORS: dict[str, str] = {
    "ppo": _DEEP[0],
    "clip_higher": _DEEP[1],
    "top_entropy": _DEEP[2],
    "bapo": _DEEP[3],
    "bapo_official": _DEEP[4],
    "bapo_value": _DEEP[5],
    "clip_0.8_1.5": _DEEP[6],
    "clip_0.5_1.2": _DEEP[8],
    "gspo": _DEEP[9],
    "cispo": _DARK[4],
    "m2po": _DEEP[7],
    "clip_cov": _DARK[2],
    "kl_cov": _DARK[6],
}
METHOD_ORDER: list[str] = list(KNOWN_METHOD_COLORS)
# Extra colours for methods nobody has named yet; none of them repeats a known colour.
_EXTRA = [c for c in sns.color_palette("tab20", 20).as_hex() + _DARK
          if c not in _DEEP and c not in KNOWN_METHOD_COLORS.values()]

# matplotlib dash tuples (on, off, ...); "" is a solid line in seaborn's `dashes`.
KNOWN_STALENESS_DASHES: dict[int, str | tuple[float, ...]] = {
    1: "",
    2: (5, 2),
    4: (1.5, 1.5),
    8: (6, 2, 1.5, 2),
}
_EXTRA_DASHES: list[tuple[float, ...]] = [(3, 1, 1, 1, 1, 1), (8, 3), (2, 4), (4, 1, 4, 4)]


def _stable_index(name: str, n: int) -> int:
    # crc32, not hash(): Python salts str hashes per process, colours must not change.
    return zlib.crc32(name.encode()) % n


def method_palette(methods: Iterable[str]) -> dict[str, str]:
    """Colour per method: fixed for known names, a deterministic extra colour otherwise.

    Unknown names are placed by a stable hash and probed in sorted order, so a given set of
    methods always gets the same colours and no two unknown methods share one.
    """
    palette = {m: c for m, c in KNOWN_METHOD_COLORS.items()}
    palette.update(_variant_colours(set(methods) - set(palette)))
    taken: set[int] = set()
    for m in sorted(set(methods) - set(palette)):
        i = _stable_index(m, len(_EXTRA))
        while i in taken and len(taken) < len(_EXTRA):
            i = (i + 1) % len(_EXTRA)
        taken.add(i)
        palette[m] = _EXTRA[i]
    return palette


# A variant's colour: its method's, mixed with black (< 0) or white (> 0) by this much, in
# the order of its sorted labels; past these, variants take an extra colour.
_VARIANT_SHADES = (-0.45, 0.5, -0.7, 0.75)


def _variant_colours(methods: set[str]) -> dict[str, str]:
    """`bapo (bapo.low_start=0.8)`, a variant of a known method (analysis/core/cells.py), in a
    shade of that method's colour, so an ablation reads as its method's kin."""
    out: dict[str, str] = {}
    by_base: dict[str, list[str]] = {}
    for m in sorted(methods):
        base, changed = split_variant(m)
        if changed and base in KNOWN_METHOD_COLORS:
            by_base.setdefault(base, []).append(m)
    for base, variants in by_base.items():
        rgb = matplotlib.colors.to_rgb(KNOWN_METHOD_COLORS[base])
        for m, shade in zip(variants, _VARIANT_SHADES, strict=False):
            towards = 1.0 if shade > 0 else 0.0
            out[m] = matplotlib.colors.to_hex(
                [c + abs(shade) * (towards - c) for c in rgb])
    return out


def staleness_dashes(values: Iterable[int]) -> dict[int, str | tuple[float, ...]]:
    """Dash pattern per staleness: fixed for 1/2/4/8x, deterministic extras otherwise."""
    dashes: dict[int, str | tuple[float, ...]] = dict(KNOWN_STALENESS_DASHES)
    for v in sorted(set(int(x) for x in values) - set(dashes)):
        dashes[v] = _EXTRA_DASHES[v % len(_EXTRA_DASHES)]
    return dashes


def staleness_palette(values: Iterable[int]) -> dict[int, str]:
    """Colour per staleness, dark (fresh) to light (stale) on viridis, fixed by log2(k) so a
    level keeps its colour whichever others are plotted (1x, 2x, 4x, 8x spread over it)."""
    cmap = plt.get_cmap("viridis")
    out = {}
    for k in sorted(set(int(x) for x in values)):
        position = min(math.log2(max(k, 1)) / 3.0 * 0.85, 0.92)  # past 0.92: too pale
        out[k] = matplotlib.colors.to_hex(cmap(position))
    return out


def method_order(methods: Iterable[str]) -> list[str]:
    """Known methods in their canonical order, then the others alphabetically."""
    present = set(methods)
    return [m for m in METHOD_ORDER if m in present] + sorted(present - set(METHOD_ORDER))


def staleness_label(k: int) -> str:
    return f"{int(k)}x"


def setup() -> None:
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.0)
    # No savefig bbox="tight": every figure already runs tight_layout, and "tight" draws
    # the figure twice per file.
    plt.rcParams.update({"figure.dpi": 100, "pdf.fonttype": 42})


# The time of writing each format would otherwise stamp, left out so that a rerun on the
# same runs gives the same bytes and regenerated figures diff clean against committed ones.
# (PNG carries no time. PS/EPS keep a date matplotlib only takes from SOURCE_DATE_EPOCH.)
UNDATED = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}
SVG_SALT = "bapo-repro"  # svg element ids hash this; matplotlib's default salt is random


def save(fig: plt.Figure, out_dir: Path, name: str, formats: Iterable[str], dpi: int) -> list[Path]:
    """Write the figure once per format, the same bytes on every rerun, and close it (figures
    hold a lot of memory)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out_dir / f"{name}.{fmt}"
        with plt.rc_context({"svg.hashsalt": SVG_SALT}):
            fig.savefig(path, dpi=dpi, metadata=UNDATED.get(fmt))
        paths.append(path)
    plt.close(fig)
    return paths
