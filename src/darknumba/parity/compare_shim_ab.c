/* darknumba's shim over an AlexeyAB darknet build (include/darknet.h + libdarknet.so).
 *
 * The same dnc_* functions as compare_shim.c (pjreddie's), so that darknet_ref.py drives both
 * alike; compiled at run time against the user's own AlexeyAB tree and called through ctypes
 * in a child process. It calls AlexeyAB's own functions only and reads the `network` / `layer`
 * structs of its darknet.h; nothing of darknet is copied. The functions AlexeyAB's build
 * exports without declaring them in darknet.h are declared below with their signatures.
 *
 * AlexeyAB's loops pass a `network_state` (input, truth, delta, train, index, the network by
 * value) where pjreddie's pass the network. The network is built unfused, as training builds
 * it (parse_network_cfg_custom + load_weights; load_network_custom would fold batch norm into
 * the weights), so batch norm is compared as it is computed.
 *
 * One training step, as AlexeyAB's train_network runs it for one batch:
 *   dnc_set_input; *seen += batch; dnc_forward(train=1); dnc_backward_layer for i = n-1..0
 *   (stopping at stopbackward, skipping onlyforward layers, as backward_network does);
 *   dnc_update: *cur_iteration += 1, update_network when a full batch is done.
 */
#include <stdlib.h>
#include <string.h>
#include "darknet.h"

network parse_network_cfg_custom(char *filename, int batch, int time_steps);
void load_weights(network *net, char *filename);
void forward_network(network net, network_state state);
void update_network(network net);
float get_current_rate(network net);
float get_network_cost(network net);
image load_image(char *filename, int w, int h, int c);
layer make_contrastive_layer(int batch, int w, int h, int c, int classes, int inputs,
                             layer *yolo_layer);

static float *dnc_x, *dnc_truth;       /* the input and truth the forward pass reads */

network *dnc_load(const char *cfg, const char *weights, int clear)
{
    network *net = (network *)calloc(1, sizeof(network));
    gpu_index = -1;
    *net = parse_network_cfg_custom((char *)cfg, 0, 1);
    if (weights && weights[0]) load_weights(net, (char *)weights);
    if (clear) { *net->seen = 0; *net->cur_iteration = 0; }
    return net;
}

/* Truth floats per image. AlexeyAB's parser leaves net->truths at 0: its detector trainer
 * sizes the truth by the last yolo / gaussian_yolo / region / detection layer's l.truths
 * (max_boxes * truth_size), its classifier trainer by the classes, the output's size. */
static int dnc_truths(network *net)
{
    int k, truths = net->truths;
    if (truths) return truths;
    for (k = 0; k < net->n; ++k) {
        LAYER_TYPE t = net->layers[k].type;
        if (t == YOLO || t == GAUSSIAN_YOLO || t == REGION || t == DETECTION)
            truths = net->layers[k].truths;
    }
    /* a classifier-form [contrastive] reads truth[b * classes + k]: the classifier trainer's
     * one-hot rows of the .data file's classes */
    for (k = 0; k < net->n && !truths; ++k)
        if (net->layers[k].type == CONTRASTIVE && !net->layers[k].detection)
            truths = net->layers[k].classes;
    return truths ? truths : net->layers[net->n - 1].outputs;
}

/* Layer i becomes AlexeyAB's classifier-form [contrastive] (no yolo_layer=). Its parse_contrastive
 * reads yolo_layer->type through a null pointer when yolo_layer= is absent (since its commit
 * 74f32a39, 2020-07-25), so the caller hands the parser an [empty] layer in its place (same
 * sizes; its output and delta alias the previous layer's) and the layer is built here as that
 * parser built it before: make_contrastive_layer(..., NULL) with the sizes of its input, then
 * the keys parse_contrastive sets (steps = the net's time_steps). */
int dnc_contrastive_classifier(network *net, int i, int classes, float temperature,
                               float cls_normalizer, float max_delta, int neg_max)
{
    if (i <= 0 || i >= net->n || net->layers[i].type != EMPTY) return -1;
    layer *in = net->layers + i - 1;
    layer l = make_contrastive_layer(net->batch, in->out_w, in->out_h, in->out_c, classes,
                                     in->outputs, 0);
    l.temperature = temperature;
    l.steps = net->time_steps;
    l.cls_normalizer = cls_normalizer;
    l.max_delta = max_delta;
    l.contrastive_neg_max = neg_max;
    l.keep_delta_gpu = 1;
    net->layers[i] = l;
    if (i == net->n - 1) net->output = l.output;
    return 0;
}

void dnc_net_info(network *net, int *out)
{
    out[0] = net->n; out[1] = net->batch; out[2] = net->w; out[3] = net->h; out[4] = net->c;
    out[5] = net->inputs; out[6] = net->outputs; out[7] = dnc_truths(net);
    out[8] = net->subdivisions; out[9] = net->time_steps;
}

void dnc_set_batch(network *net, int b) { set_batch_network(net, b); }
long long dnc_get_seen(network *net) { return (long long)*net->seen; }
void dnc_set_seen(network *net, long long seen) { *net->seen = (uint64_t)seen; }
float dnc_rate(network *net) { return get_current_rate(*net); }
float dnc_cost(network *net) { return get_network_cost(*net); }

const char *dnc_layer_type(network *net, int i)
{
    switch (net->layers[i].type) {
        case CONVOLUTIONAL: return "convolutional";
        case DECONVOLUTIONAL: return "deconvolutional";
        case CONNECTED: return "connected";
        case MAXPOOL: return "maxpool";
        case LOCAL_AVGPOOL: return "local_avgpool";
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
        case SCALE_CHANNELS: return "scale_channels";
        case SAM: return "sam";
        case ACTIVE: return "activation";
        case RNN: return "rnn";
        case GRU: return "gru";
        case LSTM: return "lstm";
        case CONV_LSTM: return "conv_lstm";
        case HISTORY: return "history";
        case CRNN: return "crnn";
        case BATCHNORM: return "batchnorm";
        case REGION: return "region";
        case YOLO: return "yolo";
        case GAUSSIAN_YOLO: return "gaussian_yolo";
        case ISEG: return "iseg";
        case REORG: return "reorg3d";
        case REORG_OLD: return "reorg";
        case UPSAMPLE: return "upsample";
        case LOGXENT: return "logistic";
        case L2NORM: return "l2norm";
        case EMPTY: return "empty";
        case CONTRASTIVE: return "contrastive";
        case IMPLICIT: return "implicit";
        default: return "unknown";
    }
}

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

/* Address and length of one buffer of layer i (floats; ints for "indexes"), 0 if none. */
long long dnc_field(network *net, int i, const char *name, void **ptr)
{
    layer *l = net->layers + i;
    long long act = (long long)l->batch * l->outputs;
    long long per_channel = 0, nweights = 0, nbiases = 0;
    if (l->type == CONVOLUTIONAL || l->type == DECONVOLUTIONAL) {
        per_channel = l->n; nweights = l->nweights; nbiases = l->n;
    } else if (l->type == CONNECTED) {
        per_channel = l->outputs; nweights = (long long)l->inputs * l->outputs;
        nbiases = l->outputs;
    } else if (l->type == BATCHNORM) {
        per_channel = l->c;
    } else if (l->type == SHORTCUT || l->type == IMPLICIT) {
        nweights = l->nweights;
    }
    long long bn = l->batch_normalize ? per_channel : 0;
    /* An antialiased layer keeps its stride-1 sizes (outputs, delta, x); its forward copies
     * the blurred result, what the next layers read, to the start of l.output, and the next
     * layer's backward adds into the start of l.delta. */
    long long front = (l->antialiasing && l->input_layer)
        ? (long long)l->input_layer->batch * l->input_layer->outputs : act;
    float *f = 0;
    long long n = 0;
    *ptr = 0;
    if (!strcmp(name, "output")) { f = l->output; n = front; }
    else if (!strcmp(name, "delta")) { f = l->delta; n = act; }
    else if (!strcmp(name, "delta_front")) { f = l->delta; n = front; }
    else if (!strcmp(name, "x")) { f = l->x; n = l->batch_normalize ? act : 0; }
    else if (!strcmp(name, "x_norm")) { f = l->x_norm; n = l->batch_normalize ? act : 0; }
    /* what swish (its sigmoid), mish and hard_mish (the pre-activation) keep for backward */
    else if (!strcmp(name, "activation_input")) { f = l->activation_input; n = act; }
    else if (!strcmp(name, "weights")) { f = l->weights; n = nweights; }
    else if (!strcmp(name, "weight_updates")) { f = l->weight_updates; n = nweights; }
    else if (!strcmp(name, "biases")) { f = l->biases; n = nbiases; }
    else if (!strcmp(name, "bias_updates")) { f = l->bias_updates; n = nbiases; }
    else if (!strcmp(name, "scales")) { f = l->scales; n = bn; }
    else if (!strcmp(name, "scale_updates")) { f = l->scale_updates; n = bn; }
    else if (!strcmp(name, "mean")) { f = l->mean; n = bn; }
    else if (!strcmp(name, "variance")) { f = l->variance; n = bn; }
    else if (!strcmp(name, "rolling_mean")) { f = l->rolling_mean; n = bn; }
    else if (!strcmp(name, "rolling_variance")) { f = l->rolling_variance; n = bn; }
    else if (!strcmp(name, "cost")) { f = l->cost; n = 1; }
    else if (!strcmp(name, "indexes")) {
        if (l->type == MAXPOOL && l->indexes) { *ptr = l->indexes; return act; }
        return 0;
    }
    if (!f) return 0;
    *ptr = f;
    return n;
}

void dnc_set_input(network *net, const float *x, const float *truth)
{
    size_t nx = (size_t)net->batch * net->inputs, nt = (size_t)net->batch * dnc_truths(net);
    dnc_x = (float *)realloc(dnc_x, sizeof(float) * (nx ? nx : 1));
    memcpy(dnc_x, x, sizeof(float) * nx);
    if (truth) {
        dnc_truth = (float *)realloc(dnc_truth, sizeof(float) * (nt ? nt : 1));
        memcpy(dnc_truth, truth, sizeof(float) * nt);
    }
}

static network_state dnc_state(network *net, int train, int with_truth)
{
    network_state s;
    memset(&s, 0, sizeof s);
    s.net = *net;
    s.input = dnc_x;
    s.truth = with_truth ? dnc_truth : 0;
    s.train = train;
    s.workspace = net->workspace;
    return s;
}

/* forward_network; returns get_network_cost in train mode with truth, else 0. */
float dnc_forward(network *net, int train, int with_truth)
{
    forward_network(*net, dnc_state(net, train, with_truth));
    return train && with_truth ? get_network_cost(*net) : 0;
}

/* One iteration of backward_network's loop, for layer i. */
void dnc_backward_layer(network *net, int i)
{
    network_state s = dnc_state(net, 1, dnc_truth != 0);
    layer l = net->layers[i];
    if (i > 0) {
        s.input = net->layers[i - 1].output;
        s.delta = net->layers[i - 1].delta;
    }
    s.index = i;
    if (!l.onlyforward) l.backward(l, s);
}

/* The layers whose delta layer i's backward adds into: the previous layer, a route's inputs
 * instead, a shortcut's `from` layers, the `from` layer of [sam] / [scale_channels]. */
int dnc_backward_dests(network *net, int i, int *out, int max)
{
    layer *l = net->layers + i;
    int k = 0, j;
    if (l->type == ROUTE) {
        for (j = 0; j < l->n; ++j) if (k < max) out[k++] = l->input_layers[j];
        return k;
    }
    if (i > 0 && k < max) out[k++] = i - 1;
    if (l->type == SHORTCUT && l->input_layers) {
        for (j = 0; j < l->n; ++j)
            if (l->input_layers[j] != i - 1 && k < max) out[k++] = l->input_layers[j];
    } else if ((l->type == SAM || l->type == SCALE_CHANNELS) && l->index != i - 1 && k < max) {
        out[k++] = l->index;
    }
    return k;
}

/* train_network's update: *cur_iteration += 1 and update_network when a full batch is done. */
int dnc_update(network *net, float *rate)
{
    if (((*net->seen) / net->batch) % net->subdivisions == 0) {
        *net->cur_iteration += 1;
        *rate = get_current_rate(*net);
        update_network(*net);
        return 1;
    }
    *rate = get_current_rate(*net);
    return 0;
}

/* What AlexeyAB's detector feeds the network: the image resized to the network's size, or
 * letterboxed when [net] letter_box=1. */
int dnc_letterbox(network *net, const char *path, float *out, int *orig_wh)
{
    image im = load_image((char *)path, 0, 0, net->c);
    image sized = net->letter_box ? letterbox_image(im, net->w, net->h)
                                  : resize_image(im, net->w, net->h);
    memcpy(out, sized.data, sizeof(float) * net->w * net->h * net->c);
    orig_wh[0] = im.w; orig_wh[1] = im.h;
    free_image(im);
    free_image(sized);
    return 0;
}
