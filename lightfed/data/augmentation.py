"""Augmentation of training batches on the accelerator: random crop and horizontal flip per image, v2 transforms."""

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightfed.errors import ConfigError


def crop_flip(
    images: Tensor,
    top: Tensor,
    left: Tensor,
    mirror: Tensor,
    size: tuple[int, int],
    padding: int = 0,
    padding_mode: str = "constant",
) -> Tensor:
    """Each image of ``images`` (B, C, H, W), padded by ``padding`` on every side, cropped to ``size`` at its own
    ``top``/``left`` offset (B,) and mirrored left-right where ``mirror`` (B,) is true; one gather for the batch.
    The offsets are on the images' device."""
    padded = F.pad(images, (padding,) * 4, mode=padding_mode) if padding else images
    batch, channels, _, width = padded.shape
    height_steps = torch.arange(size[0], device=images.device)
    width_steps = torch.arange(size[1], device=images.device)
    rows = top[:, None] + height_steps
    cols = left[:, None] + torch.where(mirror[:, None], width_steps.flip(0), width_steps)
    index = (rows[:, :, None] * width + cols[:, None, :]).view(batch, 1, -1).expand(-1, channels, -1)
    return padded.flatten(2).gather(2, index).view(batch, channels, *size)


class Augmentation:
    """Random crop (after padding) and horizontal flip, each image its own, then torchvision v2 transforms.

    The crop offsets and flips come from the generator given (the client's), so a client's batches depend only on its
    seed. The v2 transforms draw from torch's global RNG (which the client seeds from its plan seed) and draw one set of
    random parameters per batch: every image of a batch gets the same one.

    In a config (the standard CIFAR recipe):

    ```yaml
    data:
      augmentation: {padding: 4, horizontal_flip: true}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.data import Augmentation
        >>> images = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).expand(3, 1, 2, 2)  # three copies of one 2x2 image
        >>> flipped = Augmentation(horizontal_flip=True)(images, torch.Generator().manual_seed(2))
        >>> flipped[:, 0, 0].tolist()  # each image's top row: the second image is mirrored
        [[1.0, 2.0], [2.0, 1.0], [1.0, 2.0]]
        >>> Augmentation(crop_size=5)(images, None)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: data.augmentation.crop_size 5 is larger than the padded 2x2 images
    """

    def __init__(
        self,
        crop_size: int | None = None,
        padding: int = 0,
        padding_mode: Literal["constant", "reflect", "replicate"] = "constant",
        horizontal_flip: bool = False,
        transforms: list[nn.Module] | None = None,
    ) -> None:
        """
        Args:
            crop_size: Side of the random square crop; null: the images' own height and width.
            padding: Pixels added on every side before cropping.
            padding_mode: ``constant`` pads zeros (the mean of normalised data), or ``reflect``, ``replicate``.
            horizontal_flip: Mirror each image left-right with probability 1/2.
            transforms: ``torchvision.transforms.v2`` transforms (or any modules) applied to the whole batch, in order.
        """
        if (crop_size is not None and crop_size < 1) or padding < 0:
            raise ConfigError(f"data.augmentation needs crop_size >= 1 and padding >= 0, got {crop_size}, {padding}")
        self.crop_size = crop_size
        self.padding = padding
        self.padding_mode = padding_mode
        self.horizontal_flip = horizontal_flip
        self.transforms = transforms or []

    def __call__(self, images: Tensor, generator: torch.Generator | None) -> Tensor:
        """The augmented batch of images (B, C, H, W); ``generator`` None: torch's global RNG."""
        if self.crop_size is not None or self.padding or self.horizontal_flip:
            images = self._crop_flip(images, generator)
        for transform in self.transforms:
            images = transform(images)
        return images

    def _crop_flip(self, images: Tensor, generator: torch.Generator | None) -> Tensor:
        batch, _, height, width = images.shape
        size = (height, width) if self.crop_size is None else (self.crop_size, self.crop_size)
        free_rows, free_cols = height + 2 * self.padding - size[0], width + 2 * self.padding - size[1]
        if free_rows < 0 or free_cols < 0:
            raise ConfigError(
                f"data.augmentation.crop_size {self.crop_size} is larger than the padded "
                f"{height + 2 * self.padding}x{width + 2 * self.padding} images"
            )
        top = torch.randint(free_rows + 1, (batch,), generator=generator)
        left = torch.randint(free_cols + 1, (batch,), generator=generator)
        mirror = torch.randint(2 if self.horizontal_flip else 1, (batch,), generator=generator)
        top, left, mirror = torch.stack([top, left, mirror]).to(images.device, non_blocking=True)  # one copy
        return crop_flip(images, top, left, mirror.bool(), size, self.padding, self.padding_mode)
