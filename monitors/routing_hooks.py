"""Where an MoE's routing is counted, for the engine (tui_app/engine/routing.py) and a watched
script (tui_app/attach/script_hook.py) alike: every MoE family transformers 5 runs calls each
layer's routed experts as one module with the router's top-k choices (`experts(hidden,
top_k_index, weights)`, a module transformers marks `is_concatenated`), so a forward pre-hook adds
them into a count on the module's own device, by `index_add_` (`bincount` would size its output on
the host, a sync). Importable without torch: the caller passes the torch its model was made with."""

from __future__ import annotations

ROUTED = "_tokentop_routed"
ONE = "_tokentop_one"
# Names the experts' forward gives its indices, for a caller that passes them by keyword.
INDEX_KWARGS = ("top_k_index", "router_indices", "selected_experts", "topk_indices")


def config_experts(model) -> tuple[int, int] | None:
    """(routed experts, experts a token) from the model's config, or None for a dense model."""
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "get_text_config", lambda: cfg)()
    n = getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None) or getattr(cfg, "n_routed_experts", None)
    k = getattr(cfg, "num_experts_per_tok", None)
    return (int(n), int(k)) if isinstance(n, int) and isinstance(k, int) and n > 1 else None


def experts_modules(model, kinds: tuple = ()) -> list:
    """Each MoE layer's routed experts, in layer order: modules transformers' experts interface made
    (it sets `is_concatenated` on them), and those of `kinds` (the engine's quantized experts)."""
    return [m for m in model.modules() if isinstance(getattr(m, "num_experts", None), int) and (hasattr(m, "is_concatenated") or isinstance(m, kinds))]


def shared_layers(model) -> int:
    """Layers with a shared expert beside the routed ones (Qwen2-MoE's `shared_expert`, DeepSeek's
    `shared_experts`): every token goes through it, so it is counted as read by every step, not routed."""
    return sum(1 for name, _ in model.named_modules() if name.rsplit(".", 1)[-1] in ("shared_expert", "shared_experts"))


def find(model, kinds: tuple = ()) -> tuple[list, dict | None, str]:
    """The model's experts modules and the routing's shape ({"layers", "experts", "top_k",
    "shared"}), or no shape and why not ("" for a dense model)."""
    config = config_experts(model)
    modules = experts_modules(model, kinds)
    if not modules:
        return [], None, ("its routers are of a kind tokentop does not count (no experts module of transformers' interface): no expert pane" if config else "")
    n = modules[0].num_experts
    if any(p.is_meta for m in modules for p in m.parameters()):
        return [], None, "its experts are offloaded (--device-map to disk): their routing is not counted"
    if any(m.num_experts != n for m in modules):
        return [], None, "its MoE layers have different numbers of experts: no expert pane"
    return modules, {"layers": len(modules), "experts": n, "top_k": config[1] if config else 0, "shared": shared_layers(model)}, ""


def count(module, args: tuple, kwargs: dict) -> None:
    index = args[1] if len(args) > 1 else next((kwargs[k] for k in INDEX_KWARGS if k in kwargs), None)
    if index is None:
        return
    # A one expanded, not a tensor of ones made: 3.5 µs a call against 5.0 (the CPU, timeit)
    getattr(module, ROUTED).index_add_(0, index.reshape(-1).long(), getattr(module, ONE).expand(index.numel()))


def hook_counts(modules: list, experts: int, torch) -> list:
    """Each module's count (made once, with its pre-hook, on the module's device): experts + 1
    columns, since Qwen-style experts take index == num_experts as "none"."""
    for m in modules:
        if not hasattr(m, ROUTED):
            device = next(iter(m.parameters()), torch.empty(0)).device
            m.register_buffer(ROUTED, torch.zeros(experts + 1, dtype=torch.long, device=device), persistent=False)
            m.register_buffer(ONE, torch.ones((), dtype=torch.long, device=device), persistent=False)
            m.register_forward_pre_hook(count, with_kwargs=True)
    return [getattr(m, ROUTED) for m in modules]
