"""The token viewer's text: where a run's tokenizer is, and each token id's text as the page
shows it (analysis/token_view.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from analysis.reports.token_data import ViewError, ViewRun

REPO = Path(__file__).resolve().parents[2]


def tokenizer_candidates(meta: dict[str, Any], explicit: Path | None,
                         repo: Path = REPO) -> list[Path]:
    """Where the run's tokenizer may be, in the order tried: --tokenizer, meta.json's warm
    start (relative to the repo it was made in), this repo's cache, the shipped builds."""
    found = [explicit] if explicit is not None else []
    stored = meta.get("warm_start")
    if stored:
        stored_path = Path(stored)
        found.append(stored_path if stored_path.is_absolute() else repo / stored_path)
        key = stored_path.name
        found += [repo / ".cache" / "warm_start" / key, repo / "experiments" / "warm_starts" / key]
    return found


def resolve_tokenizer(view: ViewRun, explicit: Path | None, repo: Path = REPO) -> Path:
    candidates = tokenizer_candidates(view.meta, explicit, repo)
    if explicit is not None and not (explicit / "tokenizer.json").is_file():
        raise ViewError(f"--tokenizer {explicit}: no tokenizer.json there (a dir written by "
                        "save_pretrained)")
    for path in candidates:
        if (path / "tokenizer.json").is_file():
            return path
    if not candidates:
        raise ViewError(f"{view.path}: meta.json names no warm start, so no tokenizer to "
                        "decode with; pass --tokenizer PATH (a dir written by save_pretrained)")
    experiment = view.meta.get("experiment") or view.run.experiment
    raise ViewError(
        f"no tokenizer for {view.path}: none of {', '.join(str(p) for p in candidates)} "
        f"exists; build the warm start with `python -m src.run experiment={experiment} "
        f"method={view.run.method_name} train.steps=1` (it writes .cache/warm_start/"
        f"{candidates[-1].name}) or pass --tokenizer PATH")


def token_texts(tokenizer_dir: Path, ids: np.ndarray) -> list[str]:
    """Each id's text as the page shows it: decoded alone, made visible."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    if len(ids) and int(ids.max()) >= len(tok):
        raise ViewError(f"the tokenizer at {tokenizer_dir} has {len(tok)} tokens but the rows "
                        f"hold token id {int(ids.max())}: not this run's tokenizer")
    texts = []
    for i in ids.tolist():
        text = tok.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if "\ufffd" in text:  # bytes that are no whole UTF-8 character on their own
            text = raw_bytes(tok.convert_ids_to_tokens(i))
        texts.append(visible(text))
    return texts


def _byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE's character for each byte (GPT-2's table), inverted."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: b for b in kept}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = 256 + n
    return {chr(c): b for b, c in chars.items()}


BYTE_OF_CHAR = _byte_level_alphabet()


def raw_bytes(piece: str) -> str:
    """A byte-level token's bytes, those that are no UTF-8 character escaped (\\xf2), so a
    sampled stray byte does not pass for the letter that spells it in the vocabulary."""
    if not all(ch in BYTE_OF_CHAR for ch in piece):
        return piece  # not a byte-level vocabulary: its own spelling is the best there is
    return bytes(BYTE_OF_CHAR[ch] for ch in piece).decode("utf-8", errors="backslashreplace")


def visible(text: str) -> str:
    """A token's text with newlines, tabs and control bytes drawn, never empty."""
    if text == "":
        return "∅"
    out = []
    for ch in text:
        if ch == "\n":
            out.append("↵\n")
        elif ch == "\t":
            out.append("→")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)
