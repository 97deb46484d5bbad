"""Seeds for tests/fuzz/fuzz_onnx: micro bundles (every tensor inline) of each variant, a voice and a prompts file."""
import os
import struct
import sys
import tempfile

import common  # noqa: F401
import onnx
from onnx import helper, numpy_helper
import torch
import onnx_bundle
from gen_lm import TINY
from moshi.models.lm import LMModel

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for kind in ("int8", "int4", "mixed"):
    torch.manual_seed(1)
    cfg = dict(TINY, dim=16, num_heads=2, num_layers=1, card=8, text_card=8, depformer_dim=16,
               depformer_num_heads=2, depformer_num_layers=1, depformer_dim_feedforward=24, hidden_scale=1.5)
    lm = LMModel(device="cpu", dtype=torch.float32, **cfg).eval()
    with torch.no_grad():
        for n, p in lm.named_parameters():
            if n.endswith("alpha"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    with tempfile.TemporaryDirectory() as tmp:
        onnx_bundle.BLOCKS = {"int8": 16, "int4": 16}
        onnx_bundle.build(lm, kind, os.path.join(tmp, "b"), tmp)
        blobs = []
        for f in ("temporal_step.onnx", "depformer_step.onnx"):
            m = onnx.load(os.path.join(tmp, "b", f))  # external data read back in
            for init in m.graph.initializer:
                if init.data_location == onnx.TensorProto.EXTERNAL:
                    init.data_location = onnx.TensorProto.DEFAULT
                    del init.external_data[:]
            blobs.append(m.SerializeToString())
    with open(os.path.join(out, f"bundle-{kind}"), "wb") as f:
        f.write(b"\0" + struct.pack("<I", len(blobs[0])) + blobs[0] + blobs[1])
    if kind == "int8":  # the depformer's step scales in float16, as an fp16 graph would hold them
        m = onnx.load_from_string(blobs[1])
        for init in m.graph.initializer:
            if init.name.endswith("_scale") and init.data_type == onnx.TensorProto.FLOAT:
                init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype("float16"), init.name))
        blob = m.SerializeToString()
        with open(os.path.join(out, "bundle-int8-f16-scales"), "wb") as f:
            f.write(b"\0" + struct.pack("<I", len(blobs[0])) + blobs[0] + blob)
    if kind == "mixed":  # the depformer's per-step float16 stacks stored [steps, N, K] and read by Gemm(transB=1)
        m = onnx.load_from_string(blobs[1])
        g = m.graph
        prod = {o: n for n in g.node for o in n.output}
        inits = {i.name: i for i in g.initializer}
        nodes, done = [], set()
        for n in g.node:
            gather = prod.get(n.input[1]) if n.op_type == "MatMul" else None
            cast = prod.get(gather.input[0]) if gather is not None and gather.op_type == "Gather" else None
            w = inits.get(cast.input[0]) if cast is not None and cast.op_type == "Cast" else None
            if w is None or len(w.dims) != 3:
                nodes.append(n)
                continue
            if w.name not in done:  # each stack transposed once
                done.add(w.name)
                w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w).transpose(0, 2, 1).copy(), w.name))
            nodes.append(helper.make_node("Gemm", list(n.input), list(n.output), name=n.name + "_gemm", transB=1))
        del g.node[:]
        g.node.extend(nodes)
        with open(os.path.join(out, "bundle-mixed-gemm"), "wb") as f:
            blob = m.SerializeToString()
            f.write(b"\0" + struct.pack("<I", len(blobs[0])) + blobs[0] + blob)
voice = os.path.join(out, "voice")
onnx_bundle.write_voice(voice + ".tmp", [[0.5, -1.0]], [[i for i in range(4)]] * 17)
with open(voice + ".tmp", "rb") as f, open(voice, "wb") as g:
    g.write(b"\1" + f.read())
os.remove(voice + ".tmp")
prompts = os.path.join(out, "prompts")
onnx_bundle.write_prompts(prompts + ".tmp", [("helpful", [1, 2, 3]), ("warm", [])])
with open(prompts + ".tmp", "rb") as f, open(prompts, "wb") as g:
    g.write(b"\2" + f.read())
os.remove(prompts + ".tmp")
