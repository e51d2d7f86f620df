/* darknumba's shim over a pjreddie darknet build (include/darknet.h + libdarknet.so).
 *
 * `darknumba compare` compiles this file at run time against the user's own darknet tree and
 * calls it through ctypes (src/darknumba/darknet_ref.py), always in a child process: darknet
 * calls exit() on errors. Every function here only calls darknet's public API and reads the
 * `network` / `layer` structs that darknet.h declares; nothing of darknet is copied.
 *
 * Sequence for one training step, as in train_network_datum (network.c):
 *   dnc_set_input; *seen += batch; dnc_forward(train=1); dnc_backward_layer for i = n-1..0
 *   (stopping at a stopbackward layer, as backward_network does), reading the deltas of the
 *   layer and of its dnc_backward_dests before and after each; read buffers;
 *   dnc_update (update_network only when (seen/batch) % subdivisions == 0); read buffers.
 */
#include <string.h>
#include "darknet.h"

network *dnc_load(const char *cfg, const char *weights, int clear)
{
    gpu_index = -1;    /* the CPU path, also in a GPU build */
    return load_network((char *)cfg, (char *)weights, clear);
}

/* Net fields as ints: n, batch, w, h, c, inputs, outputs, truths, subdivisions, time_steps. */
void dnc_net_info(network *net, int *out)
{
    out[0] = net->n; out[1] = net->batch; out[2] = net->w; out[3] = net->h; out[4] = net->c;
    out[5] = net->inputs; out[6] = net->outputs; out[7] = net->truths;
    out[8] = net->subdivisions; out[9] = net->time_steps;
}

void dnc_set_batch(network *net, int b) { set_batch_network(net, b); }

long long dnc_get_seen(network *net) { return (long long)*net->seen; }
void dnc_set_seen(network *net, long long seen) { *net->seen = (size_t)seen; }
float dnc_rate(network *net) { return get_current_rate(net); }
float dnc_cost(network *net) { return *net->cost; }

/* The cfg section name of a layer type ("convolutional", "yolo", ...). */
const char *dnc_layer_type(network *net, int i)
{
    switch (net->layers[i].type) {
        case CONVOLUTIONAL: return "convolutional";
        case DECONVOLUTIONAL: return "deconvolutional";
        case CONNECTED: return "connected";
        case MAXPOOL: return "maxpool";
        case SOFTMAX: return "softmax";
        case DETECTION: return "detection";
        case DROPOUT: return "dropout";
        case CROP: return "crop";
        case ROUTE: return "route";
        case COST: return "cost";
        case NORMALIZATION: return "normalization";
        case AVGPOOL: return "avgpool";
        case LOCAL: return "local";
        case SHORTCUT: return "shortcut";
        case ACTIVE: return "activation";
        case RNN: return "rnn";
        case GRU: return "gru";
        case LSTM: return "lstm";
        case CRNN: return "crnn";
        case BATCHNORM: return "batchnorm";
        case REGION: return "region";
        case YOLO: return "yolo";
        case ISEG: return "iseg";
        case REORG: return "reorg";
        case UPSAMPLE: return "upsample";
        case LOGXENT: return "logistic";   /* the [logistic] section */
        case L2NORM: return "l2norm";
        default: return "unknown";
    }
}

/* Layer fields as ints: batch, w, h, c, out_w, out_h, out_c, inputs, outputs, n, size, stride,
 * pad, groups, batch_normalize, nweights, nbiases, stopbackward. */
void dnc_layer_info(network *net, int i, int *out)
{
    layer *l = net->layers + i;
    out[0] = l->batch; out[1] = l->w; out[2] = l->h; out[3] = l->c;
    out[4] = l->out_w; out[5] = l->out_h; out[6] = l->out_c;
    out[7] = l->inputs; out[8] = l->outputs; out[9] = l->n; out[10] = l->size;
    out[11] = l->stride; out[12] = l->pad; out[13] = l->groups;
    out[14] = l->batch_normalize; out[15] = l->nweights; out[16] = l->nbiases;
    out[17] = l->stopbackward;
}

/* Address and length (in floats, or ints for "indexes") of one buffer of layer i, or 0 when
 * the layer has no such buffer. Lengths follow the make_*_layer allocations. */
long long dnc_field(network *net, int i, const char *name, void **ptr)
{
    layer *l = net->layers + i;
    long long act = (long long)l->batch * l->outputs;
    long long per_channel = 0;       /* BN arrays: conv n, connected outputs, batchnorm c */
    long long nweights = 0, nbiases = 0;
    if (l->type == CONVOLUTIONAL || l->type == DECONVOLUTIONAL) {
        per_channel = l->n; nweights = l->nweights; nbiases = l->n;
    } else if (l->type == CONNECTED) {
        per_channel = l->outputs; nweights = (long long)l->inputs * l->outputs;
        nbiases = l->outputs;
    } else if (l->type == BATCHNORM) {
        per_channel = l->c;
    }
    float *f = 0;
    long long n = 0;
    *ptr = 0;
    if (!strcmp(name, "output")) { f = l->output; n = act; }
    else if (!strcmp(name, "delta")) { f = l->delta; n = act; }
    else if (!strcmp(name, "x")) { f = l->x; n = l->batch_normalize ? act : 0; }
    else if (!strcmp(name, "x_norm")) { f = l->x_norm; n = l->batch_normalize ? act : 0; }
    else if (!strcmp(name, "weights")) { f = l->weights; n = nweights; }
    else if (!strcmp(name, "weight_updates")) { f = l->weight_updates; n = nweights; }
    else if (!strcmp(name, "biases")) { f = l->biases; n = nbiases; }
    else if (!strcmp(name, "bias_updates")) { f = l->bias_updates; n = nbiases; }
    else if (!strcmp(name, "scales")) { f = l->scales; n = l->batch_normalize ? per_channel : 0; }
    else if (!strcmp(name, "scale_updates")) { f = l->scale_updates; n = l->batch_normalize ? per_channel : 0; }
    else if (!strcmp(name, "mean")) { f = l->mean; n = l->batch_normalize ? per_channel : 0; }
    else if (!strcmp(name, "variance")) { f = l->variance; n = l->batch_normalize ? per_channel : 0; }
    else if (!strcmp(name, "rolling_mean")) { f = l->rolling_mean; n = l->batch_normalize ? per_channel : 0; }
    else if (!strcmp(name, "rolling_variance")) { f = l->rolling_variance; n = l->batch_normalize ? per_channel : 0; }
    else if (!strcmp(name, "cost")) { f = l->cost; n = 1; }
    else if (!strcmp(name, "indexes")) {
        if (l->type == MAXPOOL && l->indexes) { *ptr = l->indexes; return act; }
        return 0;
    }
    if (!f) return 0;
    *ptr = f;
    return n;
}

/* Copy x (batch * inputs floats) and truth (batch * truths floats, or NULL) into the net. */
void dnc_set_input(network *net, const float *x, const float *truth)
{
    memcpy(net->input, x, sizeof(float) * net->batch * net->inputs);
    if (truth) memcpy(net->truth, truth, sizeof(float) * net->batch * net->truths);
}

/* forward_network; test mode without truth, as network_predict runs it. Returns *net->cost. */
float dnc_forward(network *net, int train, int with_truth)
{
    float *truth = net->truth;
    net->train = train;
    net->delta = 0;
    if (!with_truth) net->truth = 0;
    forward_network(net);
    net->truth = truth;
    return *net->cost;
}

/* One iteration of backward_network's loop, for layer i (so each layer's delta can be read
 * as its own backward starts): the previous layer's output and delta as net.input / net.delta,
 * and for layer 0 the network's own input and delta (NULL in training). */
void dnc_backward_layer(network *net, int i)
{
    network n = *net;
    layer l = net->layers[i];
    if (i > 0) {
        n.input = net->layers[i - 1].output;
        n.delta = net->layers[i - 1].delta;
    }
    n.index = i;
    l.backward(l, n);
}

/* The layers whose delta layer i's backward adds into (its "destinations"): the previous
 * layer (net.delta; none for layer 0, whose net.delta is NULL in training), a route's input
 * layers instead, and a shortcut's `from` layer as well. At most `max` are written to out.
 * Returns how many there are. */
int dnc_backward_dests(network *net, int i, int *out, int max)
{
    layer *l = net->layers + i;
    int k = 0, j;
    if (l->type == ROUTE) {
        for (j = 0; j < l->n; ++j) if (k < max) out[k++] = l->input_layers[j];
        return k;
    }
    if (i > 0 && k < max) out[k++] = i - 1;
    if (l->type == SHORTCUT && l->index != i - 1 && k < max) out[k++] = l->index;
    return k;
}

/* The update half of train_network_datum: update_network when a full batch is done.
 * Returns 1 when it ran, and the rate it used in *rate. */
int dnc_update(network *net, float *rate)
{
    *rate = get_current_rate(net);
    if (((*net->seen) / net->batch) % net->subdivisions == 0) {
        update_network(net);
        return 1;
    }
    return 0;
}

/* load_image_color + letterbox_image to the network's size (what test_detector feeds it). */
int dnc_letterbox(network *net, const char *path, float *out, int *orig_wh)
{
    image im = load_image_color((char *)path, 0, 0);
    image sized = letterbox_image(im, net->w, net->h);
    memcpy(out, sized.data, sizeof(float) * net->w * net->h * net->c);
    orig_wh[0] = im.w; orig_wh[1] = im.h;
    free_image(im);
    free_image(sized);
    return 0;
}
