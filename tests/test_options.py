"""``run.options.ConvertOptions``: the conversion's options, checked once when made, with the
messages ``cell_otf2.convert`` gives for a value out of range."""

from __future__ import annotations

import dataclasses
import math

import pytest

from cell_otf2.model import DmaStyle, OrderOptions
from cell_otf2.run.options import ConvertOptions


def test_defaults_are_the_command_lines():
    options = ConvertOptions()
    assert options.dma_style is DmaStyle.RMA
    assert options.alpha == 0.5
    assert options.order == OrderOptions()
    assert not options.accept_unsynchronized_nodes


def test_of_takes_the_api_names_and_a_dma_style_string():
    options = ConvertOptions.of("messages", 0.25, 8, True)
    assert options.dma_style is DmaStyle.MESSAGES
    assert options.alpha == 0.25
    assert options.order.read_delay_ticks == 8.0
    assert options.accept_unsynchronized_nodes
    assert ConvertOptions.of(read_delay_ticks=None).order == OrderOptions()


@pytest.mark.parametrize("alpha", [-0.1, 1.5, math.nan, math.inf])
def test_alpha_out_of_range(alpha):
    with pytest.raises(ValueError, match=r"alpha must lie in \[0, 1\]"):
        ConvertOptions(alpha=alpha)


@pytest.mark.parametrize("delay", [-1.0, 2.0**32, math.nan])
def test_read_delay_out_of_range(delay):
    with pytest.raises(ValueError, match="read delay must be a finite number"):
        ConvertOptions.of(read_delay_ticks=delay)


def test_unknown_dma_style():
    with pytest.raises(ValueError, match="dma_style must be one of"):
        ConvertOptions.of(dma_style="mail")


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ConvertOptions().alpha = 1.0  # type: ignore[misc]  # the refused assignment is the test
