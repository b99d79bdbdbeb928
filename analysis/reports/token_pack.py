"""The token viewer's columns packed for the page: typed arrays in one gzipped base64 blob,
read back by analysis/reports/token_view.js."""

from __future__ import annotations

import base64
import gzip

import numpy as np
import pandas as pd

from analysis.reports.token_data import ViewError
from src.run_vocab import CLIP_STATE_NAMES

_JS_TYPES = {np.dtype("float32"): "f32", np.dtype("int32"): "i32", np.dtype("int16"): "i16",
             np.dtype("uint8"): "u8", np.dtype("uint16"): "u16", np.dtype("uint32"): "u32"}


class Packer:
    """Columns of numbers in one gzipped little-endian buffer, base64: the page inflates it
    with the browser's DecompressionStream and views each column as a typed array."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, values: np.ndarray, dtype: str) -> list:
        """Append one column; returns its [type, byte offset, length] for the page."""
        arr = np.ascontiguousarray(values, dtype=np.dtype(dtype).newbyteorder("<"))
        pad = (-self.size) % 8  # typed-array views need their element size's alignment
        if pad:
            self.chunks.append(b"\0" * pad)
            self.size += pad
        offset = self.size
        data = arr.tobytes()
        self.chunks.append(data)
        self.size += len(data)
        return [_JS_TYPES[np.dtype(dtype)], offset, int(arr.size)]

    def encoded(self) -> str:
        return base64.b64encode(gzip.compress(b"".join(self.chunks), 9, mtime=0)).decode()


def pack_run(packer: Packer, rows: pd.DataFrame, token_index: np.ndarray,
             partner: np.ndarray | None, exact: np.ndarray | None) -> dict[str, list]:
    """The page's columns of one run: one entry per token row, and one per response
    (segment: a response's rows at one update, contiguous in ROW_ORDER)."""
    codes = {name: i for i, name in enumerate(CLIP_STATE_NAMES)}
    unknown = sorted(set(rows["clip_state"]) - set(codes))
    if unknown:
        raise ViewError(f"unknown clip states {unknown} (src/run_vocab.py CLIP_STATES)")
    cols = {
        "tok": packer.add(token_index, "uint32" if token_index.max(initial=0) > 65535 else "uint16"),
        "pos": packer.add(rows["position"].to_numpy(), "int32"),
        "lpb": packer.add(rows["logp_behavior"].to_numpy(), "float32"),
        "lp": packer.add(rows["logp"].to_numpy(), "float32"),
        "ratio": packer.add(rows["ratio"].to_numpy(), "float32"),
        "adv": packer.add(rows["advantage"].to_numpy(), "float32"),
        "ent": packer.add(rows["entropy"].to_numpy(), "float32"),
        "clo": packer.add(rows["c_low"].to_numpy(), "float32"),
        "chi": packer.add(rows["c_high"].to_numpy(), "float32"),
        "state": packer.add(rows["clip_state"].map(codes).to_numpy(), "uint8"),
        "loss": packer.add(rows["in_loss"].to_numpy(), "uint8"),
    }
    if "policy_version" in rows.columns:
        cols["pv"] = packer.add(rows["policy_version"].to_numpy(), "int32")
        cols["lag"] = packer.add(rows["lag"].to_numpy(), "int32")
    if "logp_sampler" in rows.columns:  # the mismatch: the sampler's log-prob, the correction's
        cols["lps"] = packer.add(rows["logp_sampler"].to_numpy(), "float32")
    if "is_weight" in rows.columns:
        cols["isw"] = packer.add(rows["is_weight"].to_numpy(), "float32")
        cols["rsk"] = packer.add(rows["rs_keep"].to_numpy(), "uint8")
    if partner is not None:
        cols["pair"] = packer.add(partner, "int32")
    if exact is not None:
        cols["exact"] = packer.add(exact, "uint8")
    keys = [rows[c].to_numpy() for c in ("step", "update", "response_id")]
    start = np.ones(len(rows), bool)
    if len(rows):
        start[1:] = np.any([k[1:] != k[:-1] for k in keys], axis=0)
    first = np.flatnonzero(start)
    heads = rows.iloc[first]
    for name, column, dtype in (("seg_step", "step", "int32"), ("seg_update", "update", "int32"),
                                ("seg_rid", "response_id", "int32"),
                                ("seg_gid", "group_id", "int32"), ("seg_reward", "reward", "float32"),
                                ("seg_len", "response_length", "int32")):
        cols[name] = packer.add(heads[column].to_numpy(), dtype)
    cols["seg_start"] = packer.add(first, "int32")
    cols["seg_count"] = packer.add(np.diff(np.append(first, len(rows))), "int32")
    return cols
