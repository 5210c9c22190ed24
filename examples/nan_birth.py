"""Where is the NaN born? A causal −inf mask (intentional) and, later, ``log`` of a
negative (the bug). ``aoti-debug show`` names the NaN's birth first, the mask as an
Inf birth.

    aoti-debug run --level stats --dir dumps/nan -- python examples/nan_birth.py
    aoti-debug show dumps/nan
"""

from __future__ import annotations

import torch


class MaskThenLog(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, x):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return torch.log(self.enc(x, mask=mask, is_causal=True) - 10)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = MaskThenLog().eval()
    with torch.no_grad():
        out = torch.compile(model)(torch.randn(2, 16, 8))
    print(f"output holds {int(out.isnan().sum())} NaN")
