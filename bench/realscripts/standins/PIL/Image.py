"""Stand-in for ``PIL.Image``: an image is a uint8 tensor, (H, W) for mode "L" or (H, W, 3) for "RGB"
and "YCbCr". ``open`` reads 8-bit greyscale or RGB PNG files without interlacing (what ``save``
writes); ``convert`` turns RGB into YCbCr with the JPEG (ITU-R BT.601, full range) coefficients.
"""

from __future__ import annotations

import builtins
import struct
import zlib

import torch
import torch.nn.functional as F

BILINEAR, BICUBIC = 2, 3
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_COLOUR_TYPES = {"L": 0, "RGB": 2}
_YCBCR = torch.tensor([[0.299, 0.587, 0.114],
                       [-0.168736, -0.331264, 0.5],
                       [0.5, -0.418688, -0.081312]])


class Image:
    def __init__(self, pixels: torch.Tensor, mode: str):
        self.pixels, self.mode = pixels.to(torch.uint8).contiguous(), mode

    @property
    def size(self) -> tuple[int, int]:
        return self.pixels.shape[1], self.pixels.shape[0]  # (width, height), as Pillow has it

    def copy(self) -> Image:
        return Image(self.pixels.clone(), self.mode)

    def convert(self, mode: str) -> Image:
        if mode == self.mode:
            return self.copy()
        if self.mode == "L" and mode == "RGB":
            return Image(self.pixels[..., None].expand(-1, -1, 3), "RGB")
        if self.mode == "RGB" and mode == "YCbCr":
            ycc = self.pixels.float() @ _YCBCR.t() + torch.tensor([0.0, 128.0, 128.0])
            return Image(ycc.round().clamp(0, 255), "YCbCr")
        if self.mode == "RGB" and mode == "L":
            return Image((self.pixels.float() @ _YCBCR[0]).round().clamp(0, 255), "L")
        raise ValueError(f"stand-in PIL cannot convert {self.mode} to {mode}")

    def split(self) -> tuple[Image, ...]:
        if self.pixels.dim() == 2:
            return (self.copy(),)
        return tuple(Image(self.pixels[..., i], "L") for i in range(self.pixels.shape[2]))

    def crop(self, box: tuple[int, int, int, int]) -> Image:
        left, top, right, bottom = (round(v) for v in box)
        return Image(self.pixels[top:bottom, left:right], self.mode)

    def resize(self, size: tuple[int, int], resample: int = BICUBIC) -> Image:
        width, height = size
        chw = self.pixels.float().reshape(self.pixels.shape[0], self.pixels.shape[1], -1).permute(2, 0, 1)
        mode = "bicubic" if resample == BICUBIC else "bilinear"
        out = F.interpolate(chw[None], size=(height, width), mode=mode, align_corners=False)[0]
        out = out.round().clamp(0, 255).permute(1, 2, 0)
        return Image(out.squeeze(2) if self.pixels.dim() == 2 else out, self.mode)

    def save(self, path: str) -> None:
        height, width = self.pixels.shape[:2]
        rows = self.pixels.reshape(height, -1).numpy().tobytes()
        stride = len(rows) // height
        raw = b"".join(b"\x00" + rows[r * stride:(r + 1) * stride] for r in range(height))  # filter 0 per row
        header = struct.pack(">IIBBBBB", width, height, 8, _COLOUR_TYPES[self.mode], 0, 0, 0)
        with builtins.open(path, "wb") as fh:
            fh.write(_PNG_MAGIC + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b""))


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def open(path: str) -> Image:  # noqa: A001 - Pillow's name
    with builtins.open(path, "rb") as fh:
        data = fh.read()
    if not data.startswith(_PNG_MAGIC):
        raise OSError(f"stand-in PIL reads PNG files only: {path}")
    pos, idat, header = len(_PNG_MAGIC), b"", None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = header
    modes = {v: k for k, v in _COLOUR_TYPES.items()}
    if depth != 8 or colour not in modes or interlace:
        raise OSError(f"stand-in PIL reads 8-bit greyscale or RGB PNG without interlacing: {path}")
    channels = 1 if colour == 0 else 3
    raw = zlib.decompress(idat)
    stride = width * channels
    if any(raw[r * (stride + 1)] != 0 for r in range(height)):
        raise OSError(f"stand-in PIL reads PNG rows without filtering only: {path}")
    rows = b"".join(raw[r * (stride + 1) + 1:(r + 1) * (stride + 1)] for r in range(height))
    pixels = torch.frombuffer(bytearray(rows), dtype=torch.uint8).reshape(height, width, channels)
    return Image(pixels.squeeze(2) if channels == 1 else pixels, modes[colour])
