# Adapted from pytorch/examples super_resolution/data.py at commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
# Copyright (c) 2017, Pytorch contributors. BSD 3-Clause License: see LICENSE.pytorch-examples.
# Changes for the torchpact bench (CPU, offline, seconds): the BSDS300 download and image folder are
# replaced by a few synthetic grey (Y channel) images; the crops and transforms are upstream's.
import torch
from _synth import transforms
from torch.utils import data

Compose, CenterCrop, ToTensor, Resize = transforms.Compose, transforms.CenterCrop, transforms.ToTensor, transforms.Resize


class SyntheticImages(data.Dataset):
    """Stands in for DatasetFromFolder: smooth random Y-channel images, 256x256, uint8."""

    def __init__(self, count, seed, input_transform=None, target_transform=None):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        coarse = torch.rand((count, 1, 16, 16), generator=g)
        smooth = torch.nn.functional.interpolate(coarse, size=(256, 256), mode="bicubic").clamp(0, 1)
        self.images = (smooth.squeeze(1) * 255).to(torch.uint8)
        self.input_transform = input_transform
        self.target_transform = target_transform

    def __getitem__(self, index):
        input = self.images[index]
        target = input.clone()
        if self.input_transform:
            input = self.input_transform(input)
        if self.target_transform:
            target = self.target_transform(target)
        return input, target

    def __len__(self):
        return len(self.images)


def calculate_valid_crop_size(crop_size, upscale_factor):
    return crop_size - (crop_size % upscale_factor)


def input_transform(crop_size, upscale_factor):
    return Compose([
        CenterCrop(crop_size),
        Resize(crop_size // upscale_factor),
        ToTensor(),
    ])


def target_transform(crop_size):
    return Compose([
        CenterCrop(crop_size),
        ToTensor(),
    ])


def get_training_set(upscale_factor):
    crop_size = calculate_valid_crop_size(256, upscale_factor)
    return SyntheticImages(16, 0, input_transform=input_transform(crop_size, upscale_factor),
                           target_transform=target_transform(crop_size))


def get_test_set(upscale_factor):
    crop_size = calculate_valid_crop_size(256, upscale_factor)
    return SyntheticImages(4, 1, input_transform=input_transform(crop_size, upscale_factor),
                           target_transform=target_transform(crop_size))
