"""Quantized weights on huge pages: the memory is what it claims to be, read back from the
kernel's own account (/proc/self/smaps)."""

import pytest
import torch

from tui_app.commands.bench import apply_levers
from tui_app.engine import pages
from tui_app.engine.levers import quantize


def _thp_mode() -> str | None:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.index("[") + 1 : text.index("]")]


needs_thp = pytest.mark.skipif(_thp_mode() in (None, "never"), reason="this kernel gives no transparent huge pages")


def _huge_bytes_at(address: int) -> int:
    """AnonHugePages of the mapping that holds `address`, as /proc/self/smaps reports it."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1]) * 1024
    return 0


@needs_thp
def test_empty_gives_written_memory_on_huge_pages_from_a_boundary():
    t = pages.empty(8 << 20)
    assert t.dtype == torch.uint8 and t.numel() == 8 << 20 and t.data_ptr() % pages.HUGE == 0
    t.fill_(1)  # huge pages are taken on first write
    assert _huge_bytes_at(t.data_ptr()) >= 8 << 20


def test_small_requests_are_plain_tensors():
    t = pages.empty(1000)
    assert t.numel() == 1000 and t.dtype == torch.uint8


@needs_thp
def test_a_quantized_variants_pools_are_on_huge_pages(plain):
    """Each large pool of an int4 variant: its int4 layers and its int8 LM head."""
    q = quantize(plain.model, "int4", "cpu", torch.float32)
    pools = {id(getattr(m, n)): getattr(m, n) for m in q.modules() for n in getattr(m, "packs", ())}
    sizes = {t.data_ptr(): t.numel() * t.element_size() for t in pools.values()}
    large = [ptr for ptr, size in sizes.items() if size >= pages.HUGE]  # the int4 tiles, the head's int8 rows
    assert len(pools) == 3 and len(large) == 2
    assert all(_huge_bytes_at(ptr) >= sizes[ptr] - pages.HUGE for ptr in large)  # all but a last partial page


def test_adopt_moves_parameters_in_place_and_keeps_ties():
    """The fp model's parameters move onto huge pages when the compile lever first compiles it:
    the same Parameter objects, the same values, tied weights still one tensor, the same outputs."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(4096, 256)  # 4 MiB: spans whole huge pages
    head = torch.nn.Linear(256, 4096, bias=False)
    head.weight = emb.weight
    model = torch.nn.Sequential(emb, torch.nn.LayerNorm(256), head)
    ids = torch.tensor([[1, 2, 3]])
    before = {id(p): p.detach().clone() for p in model.parameters()}
    params = list(model.parameters())
    y = model(ids)
    pages.adopt(model)
    assert [id(p) for p in model.parameters()] == [id(p) for p in params]  # the same objects, moved
    assert all(torch.equal(p, before[id(p)]) for p in params)
    assert head.weight is emb.weight
    torch.testing.assert_close(model(ids), y, rtol=0, atol=0)
    if _thp_mode() not in (None, "never"):
        assert _huge_bytes_at(emb.weight.data_ptr()) >= pages.HUGE
    starts = sorted(p.data_ptr() for p in params)
    assert starts[-1] - starts[0] < 5 << 20  # one region


@needs_thp
@pytest.mark.slow
def test_the_compile_lever_puts_the_fp_weights_on_huge_pages(plain):
    assert apply_levers(plain, {"compile": True}) == ""
    plain.control.warm_compile(1, 256)
    weight = plain.model.get_input_embeddings().weight
    assert _huge_bytes_at(weight.data_ptr()) >= weight.numel() * weight.element_size() - pages.HUGE
