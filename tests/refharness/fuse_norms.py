"""Rewrites a bundle's RMS norms as ONNX Runtime's transformer optimizer leaves them: each
Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul(alpha) -> Mul(x) chain becomes one
SimplifiedLayerNormalization(x, alpha) node. The weights do not change, so the case's golden outputs stand.
    fuse_norms.py BUNDLE_DIR"""
import os
import sys

import onnx
from onnx import helper


def fuse(path):
    m = onnx.load(path, load_external_data=False)
    g = m.graph
    prod = {o: n for n in g.node for o in n.output}
    inits = {i.name for i in g.initializer}
    drop, add = set(), {}
    for n in g.node:
        if n.op_type != "Mul":
            continue
        # the outer Mul(x, Mul(alpha, Div(1, Sqrt(Add(ReduceMean(Pow(x)), eps)))))
        inner = next((prod.get(i) for i in n.input if prod.get(i) is not None and prod[i].op_type == "Mul"), None)
        if inner is None:
            continue
        alpha = next((i for i in inner.input if i in inits or (prod.get(i) and prod[i].op_type == "Cast")), None)
        div = next((prod.get(i) for i in inner.input if prod.get(i) is not None and prod[i].op_type == "Div"), None)
        if alpha is None or div is None:
            continue
        chain, cur = [inner, div], div
        for op in ("Sqrt", "Add", "ReduceMean", "Pow"):
            cur = next((prod[i] for i in cur.input if i in prod and prod[i].op_type == op), None)
            if cur is None:
                break
            chain.append(cur)
        if cur is None:
            continue
        x = cur.input[0]
        if x not in n.input:
            continue
        drop.update(id(c) for c in chain + [n])
        add[id(n)] = helper.make_node("SimplifiedLayerNormalization", [x, alpha], list(n.output), axis=-1,
                                      epsilon=1e-8, name=n.name + "_fused")
    nodes = [add.get(id(n), n) for n in g.node if id(n) not in drop or id(n) in add]
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(m, path)
    return len(add)


for f in ("temporal_step.onnx", "depformer_step.onnx"):
    print(f, "norms fused:", fuse(os.path.join(sys.argv[1], f)))
