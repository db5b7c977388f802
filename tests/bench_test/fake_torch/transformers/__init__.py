"""Fake transformers for tests/bench_test (see fake_torch/torch)."""
import torch


class BertConfig:
    vocab_size = 30522


def BertModel(config):
    return torch.Module(config)
