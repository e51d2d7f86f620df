"""What AlexeyAB's darknet adds to [convolutional] (its parse_convolutional and
make_convolutional_layer): stride_x / stride_y, dilation, antialiasing, share_index. The keys it
reads that darknumba does not compute are errors naming the key, not silently unused.
A dilated or unequally strided convolution takes the per-image im2col_cpu_ext path."""
from ..kernels.im2col import col2im_cpu, col2im_cpu_ext, ext_out_size, im2col_cpu, im2col_cpu_ext

# keys of AlexeyAB's [convolutional] that change what it computes, with their defaults
NOT_SUPPORTED = {
    "cbn": 0, "assisted_excitation": 0,
    "sway": 0, "rotate": 0, "stretch": 0, "stretch_sway": 0,
    # computed by its GPU build only
    "coordconv": 0, "grad_centr": 0, "reverse": 0,
}
# keys it reads that change nothing on a CPU: GPU streams; `dot` (read, never used); `angle`
# (for sway / rotate)
NO_EFFECT = ("stream", "wait_stream", "dot", "angle")
SHARE_NONE = -1000000000              # AlexeyAB's "no share_index" sentinel


def read_ab_keys(s, params, size, stride):
    """(stride_x, stride_y, dilation, antialiasing, shared layer or None) from AlexeyAB's
    keys."""
    sx, sy = s.find_int("stride_x", -1), s.find_int("stride_y", -1)
    sx, sy = sx if sx >= 1 else stride, sy if sy >= 1 else stride
    dilation = s.find_int("dilation", 1)
    if dilation < 1:
        raise s.error("dilation", f"must be at least 1, found {dilation}")
    if size == 1:
        dilation = 1                  # as AlexeyAB's parser
    antialiasing = s.find_int("antialiasing", 0)
    if antialiasing not in (0, 1, 2):
        raise s.error("antialiasing", f"expected 0, 1 (3x3 blur) or 2 (2x2 blur), found "
                                      f"{antialiasing}")
    for key, default in NOT_SUPPORTED.items():
        if s.find_float(key, default) != default:
            raise s.error(key, f"{key}={s.options[key]} is not supported yet")
    for key in NO_EFFECT:
        s.find_str(key, "")
    return sx, sy, dilation, antialiasing, _share_layer(s, params)


def _share_layer(s, params):
    v = s.find_int("share_index", SHARE_NONE)
    if v == SHARE_NONE:
        return None
    i = v if v >= 0 else params.index + v
    if not 0 <= i < params.index:
        raise s.error("share_index", f"layer index {v} points to layer {i}, but only layers "
                                     f"0..{params.index - 1} come before this one")
    owner = params.net.layers[i]
    owner = getattr(owner, "host", owner)          # an antialiased convolution's own layer
    if owner.type != "convolutional" or getattr(owner, "share_layer", None) is not None:
        raise s.error("share_index", f"layer {i} is not a convolutional layer with weights "
                                     f"of its own")
    return owner


def share_parameters(l, owner, where):
    """make_convolutional_layer with a share_layer: l uses owner's weights, biases, batch-norm
    scales and rolling statistics, and their gradients (so both layers' gradients add up, and
    each layer's update applies them, as in AlexeyAB). Its own: output, delta, x and the batch
    mean / variance (AlexeyAB shares these too, so its backward through the first layer's
    batch norm uses the second layer's batch statistics; kept apart, the gradient is exact)."""
    mine = (l.size, l.nweights, l.c, l.n)
    theirs = (owner.size, owner.nweights, owner.c, owner.n)
    if mine != theirs:
        raise where.error("share_index", f"size, weights, channels, filters {mine} do not "
                                         f"match the shared layer's {theirs}")
    if l.batch_normalize != owner.batch_normalize:
        raise where.error("share_index", "batch_normalize differs from the shared layer's")
    names = ["weights", "weight_updates", "biases", "bias_updates"]
    if l.batch_normalize:
        names += ["scales", "scale_updates", "rolling_mean", "rolling_variance"]
    for name in names:
        l.train_alias(name, owner)
    l.share_layer = owner


def check_ext_sizes(l):
    """AlexeyAB sizes a dilated convolution's output without the dilation but samples it with
    (pad*dilation each side): only where both give the same size is its result defined."""
    if l.dilation == 1:
        return
    pd = l.pad * l.dilation
    dw = ext_out_size(l.w, l.size, l.stride_x, pd, l.dilation)
    dh = ext_out_size(l.h, l.size, l.stride_y, pd, l.dilation)
    if (dw, dh) != (l.out_w, l.out_h):
        raise ValueError(f"dilation={l.dilation} samples a {dw}x{dh} output but AlexeyAB's "
                         f"darknet sizes it {l.out_w}x{l.out_h} (use padding = size/2, "
                         f"e.g. pad=1)")


def im2col_layer(l, im, c, out):
    """im2col of one image (and group) of l's input; with a dilation or unequal strides,
    AlexeyAB's im2col_cpu_ext."""
    if l.ext:
        im2col_cpu_ext(im, c, l.h, l.w, l.size, l.pad * l.dilation, l.stride_y, l.stride_x,
                       l.dilation, out)
    else:
        im2col_cpu(im, c, l.h, l.w, l.size, l.stride, l.pad, out)


def col2im_layer(l, col, c, out):
    if l.ext:
        col2im_cpu_ext(col, c, l.h, l.w, l.size, l.pad * l.dilation, l.stride_y, l.stride_x,
                       l.dilation, out)
    else:
        col2im_cpu(col, c, l.h, l.w, l.size, l.stride, l.pad, out)
