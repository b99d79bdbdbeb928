"""A small byte-level BPE tokenizer trained on task text, one token per digit.

Built with the `tokenizers` library and wrapped in `PreTrainedTokenizerFast(tokenizer_object=)`
(in transformers 5.x `GPT2TokenizerFast(vocab_file=...)` silently builds an empty tokenizer).
Pre-tokenization splits every digit into its own pre-token, so BPE can never merge digits:
numbers are spelled digit by digit, which is what a tiny model needs to learn addition.
The byte-level alphabet (all 256 bytes) keeps any text encodable and decoding exact.

Special tokens: `<pad>` (id 0), `<bos>` (id 1, prepended to every encoded text by the
post-processor when `add_special_tokens=True`), `<eos>` (id 2, the SFT target ends with it
and generation stops on it). Padding is on the left, as generation wants.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIAL_TOKENS = [PAD, BOS, EOS]


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 320, *, min_frequency: int = 2
) -> PreTrainedTokenizerFast:
    """Train the BPE on `texts`; `vocab_size` counts the 256 bytes and 3 special tokens.

    Deterministic for the same texts and settings. The vocabulary can come out smaller than
    `vocab_size` when the text has fewer frequent merges (arithmetic text has few).
    """
    min_size = 256 + len(SPECIAL_TOKENS)
    if vocab_size < min_size:
        raise ValueError(f"vocab_size must be >= {min_size} (bytes + specials), got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A $B",
        special_tokens=[(BOS, bos_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
