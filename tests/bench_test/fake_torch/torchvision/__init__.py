"""Fake torchvision for tests/bench_test (see fake_torch/torch): models with random weights."""
import torch


class _Models:
    class segmentation:
        @staticmethod
        def fcn_resnet50(weights=None, weights_backbone=None):
            return torch.Module()

    def __getattr__(self, name):
        return lambda weights=None: torch.Module()


models = _Models()
