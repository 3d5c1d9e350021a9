"""The CDMPP network: a transformer over the store leaves of a compact AST.

Unlike upstream CDMPP (one model per leaf count), one network takes any number of leaves:
programs are padded to the longest in the batch, attention ignores the padding, and a masked
mean+max pooling reads the program out (with `readout="work_weighted"`, also a mean weighted by
each leaf's share of the program's work).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cdmpp.model.config import ModelConfig


def sinusoidal_table(max_position: int, dim: int) -> torch.Tensor:
    """(max_position, dim) sinusoidal encoding of positions 0..max_position-1."""
    pos = torch.arange(max_position, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(max_position, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return table


def mlp(sizes, dropout: float) -> nn.Sequential:
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers += [nn.LayerNorm(b), nn.GELU(), nn.Dropout(dropout)]
    return nn.Sequential(*layers)


class CDMPPNet(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = c = config
        self.embed = (nn.Sequential(nn.Linear(c.input_width, c.embed_hidden), nn.GELU(),
                                    nn.Linear(c.embed_hidden, c.d_model))
                      if c.embed_hidden else nn.Linear(c.input_width, c.d_model))
        self.register_buffer("positions", sinusoidal_table(c.max_position, c.d_model),
                             persistent=False)
        layer = nn.TransformerEncoderLayer(c.d_model, c.n_heads, c.d_ff, c.dropout,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, c.n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(c.d_model)
        self.device_encoder = (mlp((c.device_dim, c.device_embed, c.device_embed), c.dropout)
                               if c.device_dim else None)
        # the leaves' features summed per program (what TenSet's models see), next to the
        # attention readout: the program's totals are hard to rebuild from mean and max
        self.totals = nn.Sequential(nn.Linear(c.input_width + 1, c.d_model), nn.GELU())
        self.work_weighted = c.readout == "work_weighted"
        if self.work_weighted:
            from cdmpp.dataset.programs import work_columns

            # the work columns' normalization, to undo it in the network (`set_work_affine`)
            cols = work_columns()
            self.register_buffer("work_cols", torch.tensor(cols, dtype=torch.long),
                                 persistent=False)
            self.register_buffer("work_offset", torch.zeros(len(cols)))
            self.register_buffer("work_scale", torch.ones(len(cols)))
        head_in = (4 if self.work_weighted else 3) * c.d_model + (
            c.device_embed if c.device_dim else 0)
        self.head = mlp((head_in, *c.head_hidden, 1), c.dropout)

    def set_work_affine(self, offset, scale) -> None:
        """The normalizer's (offset, scale) over all input columns (`Normalizer.feature_affine`):
        the work-weighted readout reads each leaf's raw work back from its normalized row."""
        if self.work_weighted:
            cols = self.work_cols.numpy()
            self.work_offset.copy_(torch.as_tensor(offset[cols], dtype=torch.float32))
            self.work_scale.copy_(torch.as_tensor(scale[cols], dtype=torch.float32))

    def _work_shares(self, features, mask) -> torch.Tensor:
        """(B, L) each leaf's share of its program's work (+1 per leaf, as `ProgramSet.work`
        counts the program's), 0 on padding; the raw slog columns are exp2'ed back."""
        raw = features[..., self.work_cols] / self.work_scale + self.work_offset
        work = (torch.exp2(raw.clamp(0, 100)) - 1).sum(-1)  # (B, L)
        logits = torch.log1p(work).masked_fill(~mask, float("-inf"))
        return torch.softmax(logits, dim=1).nan_to_num(0.0)  # a program with no leaf: zeros

    def program_embedding(self, features, positions, mask) -> torch.Tensor:
        """Program embedding without the device (B, 3d; 4d work-weighted): what domain
        adaptation aligns.
        features (B, L, F), positions (B, L), mask (B, L)."""
        pos = positions.clamp(max=self.config.max_position - 1)
        x = self.embed(features) + self.positions[pos]  # (B, L, d)
        x = self.encoder(x, src_key_padding_mask=~mask)  # (B, L, d)
        x = self.norm(x)
        m = mask.unsqueeze(-1).to(x.dtype)  # (B, L, 1)
        mean = (x * m).sum(1) / m.sum(1).clamp(min=1.0)  # (B, d)
        largest = x.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(1).values  # (B, d)
        n_leaves = m.sum(1)  # (B, 1)
        totals = torch.cat([(features * m).sum(1), torch.log1p(n_leaves)], dim=-1)  # (B, F+1)
        pooled = [mean, largest, self.totals(totals)]
        if self.work_weighted:
            pooled.append((x * self._work_shares(features, mask).unsqueeze(-1)).sum(1))
        return torch.cat(pooled, dim=-1)  # (B, 3d or 4d)

    def with_device(self, z: torch.Tensor, device=None) -> torch.Tensor:
        if self.device_encoder is None:
            return z
        return torch.cat([z, self.device_encoder(device)], dim=-1)

    def embed_programs(self, features, positions, mask, device=None) -> torch.Tensor:
        """Program + device embedding (what the head reads)."""
        return self.with_device(self.program_embedding(features, positions, mask), device)

    def readout(self, z: torch.Tensor) -> torch.Tensor:
        """The prediction (B,) of the transformed target from `embed_programs`' output: a
        caller that wants both runs the network once."""
        return self.head(z).squeeze(-1)

    def forward(self, features, positions, mask, device=None, targets=None, loss_fn=None):
        """Returns (prediction (B,) of the transformed target, loss or None)."""
        prediction = self.readout(self.embed_programs(features, positions, mask, device))
        loss = None if targets is None else loss_fn(prediction, targets)
        return prediction, loss
