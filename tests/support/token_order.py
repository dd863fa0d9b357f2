"""The memory-token order cuTile gives a kernel's operations, read from cuTile's IR right
after its token-order pass (a trace, no tileiras): what an impure call is ordered after."""

from __future__ import annotations

from splice.tracing import trace


def token_ordered_ir(monkeypatch, kernel, sig, arch: str = "sm_90"):
    """The root block's operations right after cuTile's token-order pass."""
    import cuda.tile._compile as compile_module
    real = compile_module.token_order_pass
    seen = []

    def record(root_block, dataflow_result):
        real(root_block, dataflow_result)
        seen.append(list(root_block.operations))
    monkeypatch.setattr(compile_module, "token_order_pass", record)
    trace.trace_kernel(kernel, sig, arch)
    [ops] = seen
    return ops


def ordered_after(op, ops) -> set[int]:
    """The ids of the operations whose memory token ``op``'s input token descends from
    (through joins and their own input tokens: everything cuTile orders it after)."""
    defs = {v.name: o for o in ops for v in o.result_vars}
    seen: set[int] = set()
    todo = [op]
    while todo:
        for var in todo.pop().all_inputs():
            o = defs.get(var.name)
            if type(var.get_type()).__name__ == "TokenTy" and o is not None \
                    and id(o) not in seen:
                seen.add(id(o))
                todo.append(o)
    return seen
