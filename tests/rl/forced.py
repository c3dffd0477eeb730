"""A stand-in model for tests: it emits a fixed token list, whatever it is fed."""

import torch


class ForcedTokens(torch.nn.Module):
    """A 'model' that emits a fixed token list, one token per forward (batch of one)."""

    def __init__(self, tokens: list[int], vocab: int):
        super().__init__()
        self.tokens, self.vocab, self.i = tokens, vocab, 0
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, **kw):
        logits = torch.full((input_ids.shape[0], 1, self.vocab), -1e4)
        logits[:, :, self.tokens[min(self.i, len(self.tokens) - 1)]] = 1e4
        self.i += 1
        return type("Out", (), {"logits": logits})()
