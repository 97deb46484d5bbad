"""Tiny PersonaPlex ONNX bundles laid out as speech-core's: temporal_step.onnx and depformer_step.onnx exported
with torch.onnx.export from step wrappers around the reference LMModel's own modules and weights, then edited with
onnx the way ONNX Runtime's quantisers edit a graph:

  fp16   every float initializer stored FLOAT16 and read through a Cast to float (keep-io-types conversion)
  int8   temporal linears -> com.microsoft MatMulNBits bits 8 block 128, asymmetric (zero_points given);
         depformer per-step layer tensors -> INT8 [16, K, N] + FP32 scales [16, N], Gather(step) -> DequantizeLinear
  int4   as int8 with MatMulNBits bits 4 block 32, symmetric (no zero_points input: 8 implied)
  mixed  temporal linears -> DynamicQuantizeLinear + MatMulInteger (per-channel INT8 weights `W_quantized` [K, N],
         `W_scale` [N], `W_zero_point` [N]) + Cast + Mul; depformer as fp16, and it (not temporal_step) computes
         the text logits from the hidden state: both placements occur

quantize(lm, kind) replaces the model's weights by what the bundle stores, dequantised, and returns the graphs'
initializers to write; write(out_dir, ...) writes the bundle (external data in NAME.onnx.data for tensors over
64 bytes, so both inline and external tensors occur)."""
import os

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper


class TemporalStep(torch.nn.Module):
    def __init__(self, lm, text_logits=True):
        super().__init__()
        self.lm = lm
        self.text_logits = text_logits

    def forward(self, text_token, audio_tokens, past_k_all, past_v_all):
        lm = self.lm
        x = lm.text_emb(text_token)
        for k in range(len(lm.emb)):
            x = x + lm.emb[k](audio_tokens[:, k:k + 1])
        offset = torch.tensor(past_k_all.shape[3])
        new_k, new_v = [], []
        for li, layer in enumerate(lm.transformer.layers):
            attn = layer.self_attn
            h = layer.norm1(x)
            qkv = F.linear(h, attn.in_proj_weight)
            H = attn.num_heads
            q, k, v = qkv.view(1, 1, 3, H, -1).permute(2, 0, 3, 1, 4)
            q, k = attn.rope(q, k, offset, time_before_heads=False)
            k = torch.cat([past_k_all[li], k], dim=2)
            v = torch.cat([past_v_all[li], v], dim=2)
            new_k.append(k)
            new_v.append(v)
            a = torch.softmax(q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5), dim=-1) @ v
            x = x + attn.out_proj(a.permute(0, 2, 1, 3).reshape(1, 1, -1))
            h = layer.norm2(x)
            g = F.linear(h, layer.gating.linear_in.weight).view(1, 1, 2, -1)
            x = x + F.linear(F.silu(g[:, :, 0]) * g[:, :, 1], layer.gating.linear_out.weight)
        hidden = lm.out_norm(x)
        if not self.text_logits:
            return hidden, torch.stack(new_k), torch.stack(new_v)
        return hidden, lm.text_linear(hidden), torch.stack(new_k), torch.stack(new_v)


class DepformerStep(torch.nn.Module):
    """One depformer step; per-step weights stacked [steps, K, N] and selected with step_idx."""

    def __init__(self, lm, text_logits=False):
        super().__init__()
        self.lm = lm
        self.text_logits = text_logits
        t = lambda w: w.detach().t().contiguous()  # noqa: E731
        P = torch.nn.Parameter
        steps = lm.dep_q
        self.dep_in = P(torch.stack([t(m.weight) for m in lm.depformer_in]))
        self.emb = P(torch.stack([e.weight.detach() for e in lm.depformer_emb]))
        self.out = P(torch.stack([t(m.weight) for m in lm.linears]))
        self.layers = []
        for li, layer in enumerate(lm.depformer.layers):
            w = layer.self_attn.in_proj_weight.detach()
            ip = P(torch.stack([t(c) for c in w.chunk(steps)]))
            ow = layer.self_attn.out_proj.weight.detach() if hasattr(layer.self_attn, "out_proj") else None
            op = P(torch.stack([t(c) for c in ow.chunk(steps)]))
            gi = P(torch.stack([t(g.linear_in.weight) for g in layer.gating]))
            go = P(torch.stack([t(g.linear_out.weight) for g in layer.gating]))
            for n, p in (("in_proj", ip), ("out_proj", op), ("linear_in", gi), ("linear_out", go)):
                self.register_parameter(f"l{li}_{n}", p)
            self.layers.append((layer, ip, op, gi, go))

    def forward(self, hidden, prev_token, step_idx, past_k, past_v):
        lm = self.lm
        x = hidden @ self.dep_in[step_idx]
        text_e = lm.depformer_text_emb(prev_token.clamp(0, lm.depformer_text_emb.num_embeddings - 1))
        audio_e = F.embedding(prev_token.clamp(0, self.emb.shape[1] - 1), self.emb[(step_idx - 1).clamp(min=0)])
        x = x + torch.where(step_idx == 0, text_e, audio_e)
        new_k, new_v = [], []
        for li, (layer, ip, op, gi, go) in enumerate(self.layers):
            H = layer.self_attn.num_heads
            h = layer.norm1(x)
            q, k, v = (h @ ip[step_idx]).view(1, 1, 3, H, -1).permute(2, 0, 3, 1, 4)
            k = torch.cat([past_k[li], k], dim=2)
            v = torch.cat([past_v[li], v], dim=2)
            new_k.append(k)
            new_v.append(v)
            a = torch.softmax(q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5), dim=-1) @ v
            x = x + a.permute(0, 2, 1, 3).reshape(1, 1, -1) @ op[step_idx]
            h = layer.norm2(x)
            g = (h @ gi[step_idx]).view(1, 1, 2, -1)
            x = x + (F.silu(g[:, :, 0]) * g[:, :, 1]) @ go[step_idx]
        out = (x @ self.out[step_idx], torch.stack(new_k), torch.stack(new_v))
        return (self.lm.text_linear(hidden),) + out if self.text_logits else out


def export(module, args, names_in, names_out, dynamic, path):
    torch.onnx.export(module, args, path, input_names=names_in, output_names=names_out, dynamic_axes=dynamic,
                      opset_version=17, do_constant_folding=True)
    return onnx.load(path)


def make_graphs(lm, tmp, text_in_depformer=False):
    L, H = len(lm.transformer.layers), lm.transformer.layers[0].self_attn.num_heads
    hd = lm.dim // H
    Ld = len(lm.depformer.layers)
    Hd = lm.depformer.layers[0].self_attn.num_heads
    hdd = lm.depformer.layers[0].self_attn.embed_dim // Hd
    T = 2
    with torch.no_grad():
        t = export(TemporalStep(lm, not text_in_depformer).eval(),
                   (torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, lm.n_q, dtype=torch.long),
                    torch.zeros(L, 1, H, T, hd), torch.zeros(L, 1, H, T, hd)),
                   ["text_token", "audio_tokens", "past_k_all", "past_v_all"],
                   ["hidden"] + ([] if text_in_depformer else ["text_logits"]) + ["new_k_all", "new_v_all"],
                   {"past_k_all": {3: "T"}, "past_v_all": {3: "T"}, "new_k_all": {3: "T1"}, "new_v_all": {3: "T1"}},
                   os.path.join(tmp, "t.onnx"))
        d = export(DepformerStep(lm, text_in_depformer).eval(),
                   (torch.zeros(1, 1, lm.dim), torch.zeros(1, 1, dtype=torch.long), torch.tensor(1),
                    torch.zeros(Ld, 1, Hd, T, hdd), torch.zeros(Ld, 1, Hd, T, hdd)),
                   ["hidden", "prev_token", "step_idx", "past_k", "past_v"],
                   (["text_logits"] if text_in_depformer else []) + ["logits", "new_k", "new_v"],
                   {"past_k": {3: "T"}, "past_v": {3: "T"}, "new_k": {3: "T1"}, "new_v": {3: "T1"}},
                   os.path.join(tmp, "d.onnx"))
    return t, d


def inits(g):
    return {i.name: i for i in g.initializer}


def consumers(g, name):
    return [(n, j) for n in g.node for j, x in enumerate(n.input) if x == name]


def replace_init(g, name, arr):
    for i, init in enumerate(g.initializer):
        if init.name == name:
            g.initializer[i].CopyFrom(numpy_helper.from_array(arr, name))
            return
    raise KeyError(name)


def matmul_weights(g):
    """(node, weight initializer) of each MatMul whose B is a 2-D initializer, in node order."""
    ini = inits(g)
    return [(n, ini[n.input[1]]) for n in g.node
            if n.op_type == "MatMul" and n.input[1] in ini and len(ini[n.input[1]].dims) == 2]


def nbits_quant(w_kn, bits, block, symmetric):
    """w [K, N] -> (B [N, blocks, block*bits/8] u8, scales [N*blocks] f32, zp u8 or None, dequantised [K, N])."""
    K, N = w_kn.shape
    nb = -(-K // block)
    w = np.zeros((N, nb * block), np.float32)
    w[:, :K] = w_kn.T
    wb = w.reshape(N, nb, block)
    qmax = (1 << bits) - 1
    if symmetric:
        mid = 1 << (bits - 1)
        scale = np.abs(wb).max(axis=2) / (mid - 1)
        scale[scale == 0] = 1
        zp = np.full((N, nb), mid, np.float32)
    else:
        lo = np.minimum(wb.min(axis=2), 0)
        hi = np.maximum(wb.max(axis=2), 0)
        scale = (hi - lo) / qmax
        scale[scale == 0] = 1
        zp = np.clip(np.round(-lo / scale), 0, qmax)
    scale = scale.astype(np.float32)
    q = np.clip(np.round(wb / scale[:, :, None]) + zp[:, :, None], 0, qmax).astype(np.uint8)
    deq = ((q.astype(np.float32) - zp[:, :, None]) * scale[:, :, None]).reshape(N, nb * block)[:, :K].T
    if bits == 4:
        q = q[:, :, 0::2] | (q[:, :, 1::2] << 4)
    zpu = None
    if not symmetric:
        zpu = zp.astype(np.uint8)
        if bits == 4:
            if nb % 2:
                zpu = np.concatenate([zpu, np.zeros((N, 1), np.uint8)], axis=1)
            zpu = zpu[:, 0::2] | (zpu[:, 1::2] << 4)
        zpu = zpu.reshape(-1)
    return q, scale.reshape(-1), zpu, np.ascontiguousarray(deq)


def to_matmulnbits(g, bits, block, symmetric, skip):
    """Every MatMul with a 2-D initializer B (but those in skip) becomes MatMulNBits; returns {init name: deq}."""
    deq = {}
    nodes = list(g.node)
    for n, w in matmul_weights(g):
        if w.name in skip:
            continue
        arr = numpy_helper.to_array(w).astype(np.float32)
        K, N = arr.shape
        q, s, zp, d = nbits_quant(arr, bits, block, symmetric)
        deq[w.name] = d
        base = w.name.replace(":", "_").replace(".", "_")
        g.initializer.extend([numpy_helper.from_array(q, base + "_Q%d" % bits),
                              numpy_helper.from_array(s, base + "_scales")])
        ins = [n.input[0], base + "_Q%d" % bits, base + "_scales"]
        if zp is not None:
            g.initializer.append(numpy_helper.from_array(zp, base + "_zero_points"))
            ins.append(base + "_zero_points")
        new = helper.make_node("MatMulNBits", ins, list(n.output), name=n.name + "_Q%d" % bits,
                               domain="com.microsoft", K=K, N=N, bits=bits, block_size=block)
        nodes[nodes.index(n)] = new
        drop_init(g, w.name)
    del g.node[:]
    g.node.extend(nodes)
    return deq


def drop_init(g, name):
    keep = [i for i in g.initializer if i.name != name]
    del g.initializer[:]
    g.initializer.extend(keep)


def to_matmulinteger(g, skip):
    """quantize_dynamic per channel, INT8 symmetric weights: MatMul(A, W) -> DynamicQuantizeLinear(A) ->
    MatMulInteger(A_q, W_quantized, A_zp, W_zero_point) -> Cast float -> Mul(A_scale * W_scale)."""
    deq = {}
    nodes = []
    mm = {n.name: w for n, w in matmul_weights(g) if w.name not in skip}
    for n in g.node:
        if n.name not in mm:
            nodes.append(n)
            continue
        w = mm[n.name]
        arr = numpy_helper.to_array(w).astype(np.float32)
        scale = (np.abs(arr).max(axis=0) / 127).astype(np.float32)
        scale[scale == 0] = 1
        q = np.clip(np.round(arr / scale), -127, 127).astype(np.int8)
        deq[w.name] = q.astype(np.float32) * scale
        b = w.name.replace(":", "_").replace(".", "_")
        g.initializer.extend([numpy_helper.from_array(q, b + "_quantized"), numpy_helper.from_array(scale, b + "_scale"),
                              numpy_helper.from_array(np.zeros(arr.shape[1], np.int8), b + "_zero_point")])
        a = n.input[0]
        nodes += [helper.make_node("DynamicQuantizeLinear", [a], [a + "_q", a + "_s", a + "_zp"],
                                   name=n.name + "_dq"),
                  helper.make_node("MatMulInteger", [a + "_q", b + "_quantized", a + "_zp", b + "_zero_point"],
                                   [n.output[0] + "_i32"], name=n.name + "_mmi"),
                  helper.make_node("Cast", [n.output[0] + "_i32"], [n.output[0] + "_f"], to=TensorProto.FLOAT,
                                   name=n.name + "_cast"),
                  helper.make_node("Mul", [a + "_s", b + "_scale"], [n.output[0] + "_sc"], name=n.name + "_scm"),
                  helper.make_node("Mul", [n.output[0] + "_f", n.output[0] + "_sc"], [n.output[0]],
                                   name=n.name + "_mul")]
        drop_init(g, w.name)
    del g.node[:]
    g.node.extend(nodes)
    return deq


def dep_gint8(g, stacked):
    """The stacked per-step layer tensors [S, K, N] read by Gather(step) -> MatMul become INT8 + FP32 scales [S, N]
    read by Gather(step) -> DequantizeLinear(axis=-1) (the scales gathered by the same step)."""
    deq = {}
    ini = inits(g)
    nodes = []
    for n in g.node:
        if n.op_type == "Gather" and n.input[0] in stacked:
            name = n.input[0]
            arr = numpy_helper.to_array(ini[name]).astype(np.float32)
            scale = (np.abs(arr).max(axis=1) / 127).astype(np.float32)  # [S, N]
            scale[scale == 0] = 1
            q = np.clip(np.round(arr / scale[:, None, :]), -127, 127).astype(np.int8)
            deq[name] = q.astype(np.float32) * scale[:, None, :]
            b = name.replace(".", "_")
            g.initializer.extend([numpy_helper.from_array(q, b + "_int8"), numpy_helper.from_array(scale, b + "_scale")])
            drop_init(g, name)
            out = n.output[0]
            nodes += [helper.make_node("Gather", [b + "_int8", n.input[1]], [out + "_q"], axis=0, name=n.name + "_q"),
                      helper.make_node("Gather", [b + "_scale", n.input[1]], [out + "_s"], axis=0, name=n.name + "_s"),
                      helper.make_node("DequantizeLinear", [out + "_q", out + "_s"], [out], axis=-1,
                                       name=n.name + "_deq")]
        else:
            nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    return deq


def to_fp16(g):
    """Float initializers stored FLOAT16, each read through one Cast to FLOAT placed before its first consumer."""
    deq = {}
    nodes = list(g.node)
    for init in list(g.initializer):
        if init.data_type != TensorProto.FLOAT:
            continue
        name = init.name
        users = [i for i, n in enumerate(nodes) if name in n.input]
        if not users:  # not read by the graph: drop it
            g.initializer.remove(init)
            continue
        h = numpy_helper.to_array(init).astype(np.float16)
        deq[name] = h.astype(np.float32)
        init.CopyFrom(numpy_helper.from_array(h, name + "_fp16"))
        cast = helper.make_node("Cast", [name + "_fp16"], [name.replace("::", "_") + "_f32"],
                                to=TensorProto.FLOAT, name="Cast_" + name.replace("::", "_"))
        for n in nodes:
            for j, x in enumerate(n.input):
                if x == name:
                    n.input[j] = cast.output[0]
        first = users[0]
        nodes.insert(first, cast)
    del g.node[:]
    g.node.extend(nodes)
    return deq


BLOCKS = {"int8": 128, "int4": 32}  # ONNX Runtime's block sizes in the published bundles


def build(lm, kind, out_dir, tmp):
    """Exports and quantises the bundle for kind (fp16, int8, int4, mixed) into out_dir; returns the state dict of
    the dequantised weights the bundle holds (what the golden run must use)."""
    t, d = make_graphs(lm, tmp, text_in_depformer=kind == "mixed")
    sd = {k: v.detach().clone() for k, v in lm.state_dict().items()}
    by_value = {}
    for k, v in sd.items():
        a = v.float().numpy()
        by_value[a.tobytes()] = (k, False)
        if a.ndim == 2:
            by_value[np.ascontiguousarray(a.T).tobytes()] = (k, True)
    steps = lm.dep_q
    stacked = {"dep_in": "depformer_in.{}.weight", "out": "linears.{}.weight"}
    for li in range(len(lm.depformer.layers)):
        stacked[f"l{li}_linear_in"] = f"depformer.layers.{li}.gating.{{}}.linear_in.weight"
        stacked[f"l{li}_linear_out"] = f"depformer.layers.{li}.gating.{{}}.linear_out.weight"
        stacked[f"l{li}_in_proj"] = f"depformer.layers.{li}.self_attn.in_proj_weight"
        stacked[f"l{li}_out_proj"] = f"depformer.layers.{li}.self_attn.out_proj.weight"

    seen = set()

    def assign(g, name, arr, original):
        """Puts the dequantised initializer `name` of graph g back into sd."""
        seen.add(name)
        if name in stacked:  # [S, K, N] per-step transposed weights
            pat = stacked[name]
            if "{}" in pat:
                for s in range(steps):
                    sd[pat.format(s)] = torch.from_numpy(np.ascontiguousarray(arr[s].T))
            else:
                sd[pat] = torch.from_numpy(np.concatenate([arr[s].T for s in range(steps)]))
            return
        if name == "emb":
            for s in range(steps - 1):
                sd[f"depformer_emb.{s}.weight"] = torch.from_numpy(arr[s].copy())
            return
        key, transposed = by_value[original.tobytes()]
        sd[key] = torch.from_numpy(np.ascontiguousarray(arr.T if transposed else arr)).reshape(sd[key].shape)

    weights = lambda g: {i.name: numpy_helper.to_array(i).astype(np.float32) for i in g.initializer  # noqa: E731
                         if i.data_type == TensorProto.FLOAT and
                         (i.name in stacked or i.name == "emb" or
                          numpy_helper.to_array(i).astype(np.float32).tobytes() in by_value)}
    for g in (t.graph, d.graph):
        orig = weights(g)
        if kind == "fp16":
            deq = to_fp16_only(g, set(orig))
        elif kind in ("int8", "int4"):
            bits, block, sym = (8, BLOCKS["int8"], False) if kind == "int8" else (4, BLOCKS["int4"], True)
            deq = to_matmulnbits(g, bits, block, sym, skip=set()) if g is t.graph else {}
            if g is d.graph:
                deq = dep_gint8(g, {n for n in stacked if n.startswith("l")})
        elif kind == "mixed":
            deq = to_matmulinteger(g, skip=set()) if g is t.graph else to_fp16_only(g, set(orig))
        for name, arr in deq.items():
            assign(g, name, arr, orig[name])
    # every weight of the model must have been found in a graph (fp16: all of them; else the quantised ones)
    found = {i.name for g in (t.graph, d.graph) for i in g.initializer}
    print("bundle", kind, "initializers", len(found), "dequantised", len(seen))
    os.makedirs(out_dir, exist_ok=True)
    for m, fname in ((t, "temporal_step.onnx"), (d, "depformer_step.onnx")):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        onnx.save_model(m, os.path.join(out_dir, fname), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=fname + ".data", size_threshold=64)
    return sd


def to_fp16_only(g, names):
    """to_fp16 restricted to the weights (not the folded constants of the graph's own arithmetic)."""
    keep = [i for i in g.initializer if i.name not in names]
    conv = [i for i in g.initializer if i.name in names]
    del g.initializer[:]
    g.initializer.extend(conv)
    deq = to_fp16(g)
    g.initializer.extend(keep)
    return deq


def write_voice(path, emb, cache):
    """voices/<name>.bin: u32 magic 0x50506558, version 1, streams, history, i64 cache[streams*history],
    u32 frames, u32 dim, f32 embeddings[frames*dim]."""
    import struct
    emb = np.asarray(emb, np.float32)
    cache = np.asarray(cache, np.int64)
    with open(path, "wb") as f:
        f.write(struct.pack("<4I", 0x50506558, 1, cache.shape[0], cache.shape[1]))
        f.write(cache.astype("<i8").tobytes())
        f.write(struct.pack("<2I", emb.shape[0], emb.shape[1]))
        f.write(emb.astype("<f4").tobytes())


def write_prompts(path, prompts):
    """system_prompts.bin: u32 magic 0x50506573, version 1, count; per prompt u32 name length, name, u32 token
    count, i32 ids."""
    import struct
    with open(path, "wb") as f:
        f.write(struct.pack("<3I", 0x50506573, 1, len(prompts)))
        for name, ids in prompts:
            f.write(struct.pack("<I", len(name)) + name.encode())
            f.write(struct.pack("<I", len(ids)) + np.asarray(ids, "<i4").tobytes())
