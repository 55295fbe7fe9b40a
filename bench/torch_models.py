"""PyTorch twins of Tandem's transformers, for the benchmarks (bench/pytorch_train.py --config) and
the tests that hold Tandem to PyTorch (tests/models/torch_transformer_check.py):

  GPT: nanoGPT's model.py (karpathy/nanoGPT), the same names; its attention through
       F.scaled_dot_product_attention where torch has it (2.0 and later), spelt out otherwise
       (Debian's torch 1.13), as nanoGPT's own fallback does. config["attention"]: "auto" (that
       choice), "sdpa" or "eager" (spelt out, keeping the (T, T) probabilities).
  vit(config): torchvision's VisionTransformer with conv_proj taking in_channels.

config: a dict with the model section's keys (docs/TRANSFORMERS.md).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"], bias=c["bias"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=c["bias"])
        self.n_head = c["n_head"]
        self.dropout = c.get("dropout", 0.0)
        self.resid_dropout = nn.Dropout(self.dropout)
        attention = c.get("attention", "auto")
        self.sdpa = hasattr(F, "scaled_dot_product_attention") if attention == "auto" else attention == "sdpa"

    def forward(self, x):
        b, t, e = x.size()
        q, k, v = self.c_attn(x).split(e, dim=2)
        q, k, v = (z.view(b, t, self.n_head, e // self.n_head).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                               is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            att = F.dropout(att, self.dropout, self.training)
            y = att @ v
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, e)))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])
        self.dropout = nn.Dropout(c.get("dropout", 0.0))

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c["n_embd"], c["bias"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c["n_embd"], c["bias"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]), wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            drop=nn.Dropout(c.get("dropout", 0.0)), h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=LayerNorm(c["n_embd"], c["bias"])))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # nanoGPT's weight tying

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(t, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def vit(c):
    from torchvision.models.vision_transformer import VisionTransformer
    model = VisionTransformer(image_size=c["image_size"], patch_size=c["patch_size"], num_layers=c["num_layers"],
                              num_heads=c["num_heads"], hidden_dim=c["hidden_dim"], mlp_dim=c["mlp_dim"],
                              dropout=c.get("dropout", 0.0), attention_dropout=c.get("attention_dropout", 0.0),
                              num_classes=c["num_classes"])
    model.conv_proj = nn.Conv2d(c["in_channels"], c["hidden_dim"], kernel_size=c["patch_size"],
                                stride=c["patch_size"])
    return model


# The defaults of our model section (engine/nn/model_spec.h) for the keys a config leaves out.
DEFAULTS = {"num_classes": 10, "in_channels": 3, "input_size": 32, "patch_size": 16, "num_layers": 12,
            "num_heads": 12, "hidden_dim": 768, "mlp_dim": 3072, "attention_dropout": 0.0, "block_size": 1024,
            "vocab_size": 50304, "n_layer": 12, "n_head": 12, "n_embd": 768, "bias": True, "dropout": 0.0}


def model_config(section):
    c = dict(DEFAULTS)
    c.update(section)
    c.setdefault("image_size", c["input_size"])
    return c
