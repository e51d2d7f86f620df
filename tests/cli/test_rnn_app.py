"""`darknumba rnn train / generate` (Darknet's examples/rnn.c): the batch layout against a
plain copy of get_rnn_data's loops, sampling against sample_array's loop, a tiny network that
learns a repeating text and generates it back, the command grammar and its one-line errors."""
import numpy as np
import pytest
from conftest import ROOT

from darknumba.cli import run
from darknumba.parser import parse_network_cfg
from darknumba.train.rnn import get_rnn_data, sample_array

CFG = ROOT / "cfg" / "rnn-tiny.cfg"
TEXT = b"hello world "


def darknet_get_rnn_data(text, offsets, characters, streams, steps):
    """get_rnn_data as Darknet writes it: for each stream, for each step, the byte at the
    stream's offset into row step*streams + stream of x, the next byte into y."""
    x = np.zeros(streams * steps * characters, np.float32)
    y = np.zeros(streams * steps * characters, np.float32)
    for i in range(streams):
        for j in range(steps):
            curr = int(text[offsets[i] % len(text)])
            nxt = int(text[(offsets[i] + 1) % len(text)])
            x[(j * streams + i) * characters + curr] = 1
            y[(j * streams + i) * characters + nxt] = 1
            offsets[i] = (offsets[i] + 1) % len(text)
    return x, y


def darknet_sample_array(a, r):
    a = a / np.float32(a.sum())
    for i in range(a.size):
        r -= a[i]
        if r <= 0:
            return i
    return a.size - 1


def call(capsys, *args):
    code = run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("streams,steps", [(1, 1), (3, 5), (4, 40)])
def test_batch_layout_is_darknets(rng, streams, steps):
    text = np.frombuffer(b"The quick brown fox jumps over the lazy dog.\n", np.uint8)
    offsets = rng.integers(0, text.size, streams)
    offsets[0] = text.size - 1                      # wraps at once
    ref_offsets = offsets.copy()
    for _ in range(3):                              # offsets carry over from datum to datum
        x, y = get_rnn_data(text, offsets, 256, streams, steps)
        rx, ry = darknet_get_rnn_data(text, ref_offsets, 256, streams, steps)
        np.testing.assert_array_equal(x, rx)
        np.testing.assert_array_equal(y, ry)
        np.testing.assert_array_equal(offsets, ref_offsets)


def test_sampling_is_darknets(rng):
    for _ in range(200):
        p = rng.random(256).astype(np.float32) ** 8
        r = rng.random()
        assert sample_array(p, r) == darknet_sample_array(p, r)


def test_reset_state_forgets_one_stream(tmp_path, rng):
    for section in ("[rnn]\noutput=4\nactivation=tanh", "[gru]\noutput=4", "[lstm]\noutput=4"):
        cfg = tmp_path / "r.cfg"
        cfg.write_text(f"[net]\ninputs=3\nbatch=3\ntime_steps=2\n{section}\n")
        net = parse_network_cfg(cfg)
        net.forward(rng.random(net.batch * 3).astype(np.float32))      # test mode: state kept
        l = net.layers[0]
        states = [getattr(l, n) for n in l.STATE_NAMES]
        before = [s.reshape(3, 4).copy() for s in states]
        assert all(np.all(b != 0) for b in before)
        net.reset_state(1)
        for s, b in zip(states, before):
            s = s.reshape(3, 4)
            assert np.all(s[1] == 0)
            np.testing.assert_array_equal(s[[0, 2]], b[[0, 2]])


def test_one_step_network_carries_state_like_the_sequence(tmp_path, rng):
    """generate's network (batch 1, time_steps 1, the trained weights) fed byte by byte gives
    what the cfg's network gives on the whole sequence in one test-mode pass."""
    cfg = tmp_path / "s.cfg"
    cfg.write_text("[net]\ninputs=256\nbatch=1\ntime_steps=6\n[rnn]\noutput=8\nactivation=tanh\n"
                   "[connected]\noutput=256\nactivation=linear\n[softmax]\n")
    seq = parse_network_cfg(cfg, seed=3)
    w = tmp_path / "s.weights"
    from darknumba.weights import save_weights
    save_weights(seq, w)
    from darknumba.train.rnn import generation_network
    one = generation_network(cfg, w)
    assert (one.batch, one.time_steps) == (1, 1)
    text = np.frombuffer(b"abcdef", np.uint8)
    x = np.zeros((6, 256), np.float32)
    x[np.arange(6), text] = 1
    whole = seq.predict(x)
    for t in range(6):
        np.testing.assert_allclose(one.predict(x[t])[0], whole[t], rtol=1e-5, atol=1e-7)


def test_learns_a_repeating_text_and_generates_it(tmp_path, capsys):
    text = tmp_path / "hello.txt"
    text.write_bytes(TEXT * 40)
    code, out, err = call(capsys, "rnn", "train", CFG, text, "--max-batches", 150,
                          "--backup", tmp_path / "backup", "--backup-every", 50)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 150
    first, last = lines[0].split(), lines[-1].split()
    assert first[0] == "1:" and last[0] == "150:"
    # the mean of the loss layers' costs a byte: softmax's ln 256 = 5.5 and [cost]'s ~1 at first
    assert float(first[1].rstrip(",")) > 3.0
    assert float(last[2]) < 0.1                              # the average loss
    assert float(last[-2]) == pytest.approx(150 * 128 / len(TEXT * 40), rel=1e-5)  # epochs
    assert "Learning Rate: 0.1, Momentum: 0.9, Decay: 0.0005, Inputs: 256 128 16" in err
    weights = tmp_path / "backup" / "rnn-tiny_final.weights"
    assert sorted(p.name for p in (tmp_path / "backup").iterdir()) == \
        ["rnn-tiny.backup", "rnn-tiny_final.weights"]
    code, out, err = call(capsys, "rnn", "generate", CFG, weights, "-seed", "hello",
                          "-len", 60, "-temp", 0.5, "-srand", 7)
    assert code == 0, err
    assert out == (TEXT * 6)[:65].decode() + "\n"
    assert err.strip() == "rnn-tiny"


def test_checkpoints_and_resume(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_bytes(b"abc" * 50)
    backup = tmp_path / "b"
    code, out, err = call(capsys, "rnn", "train", CFG, text, "--max-batches", 6, "--backup",
                          backup, "--checkpoint-every", 4, "--backup-every", 3)
    assert code == 0, err
    assert sorted(p.name for p in backup.iterdir()) == \
        ["rnn-tiny.backup", "rnn-tiny_4.weights", "rnn-tiny_final.weights"]
    code, out, err = call(capsys, "rnn", "train", CFG, backup / "rnn-tiny_final.weights",
                          "-file", text, "--max-batches", 8, "--backup", backup)  # Darknet's way
    assert code == 0, err
    assert [l.split()[0] for l in out.splitlines()[-2:]] == ["7:", "8:"]
    code, out, err = call(capsys, "rnn", "train", CFG, text, backup / "rnn-tiny_final.weights",
                          "-clear", "--max-batches", 1, "--backup", backup)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("1: ")


def test_ctrl_c_saves_the_backup_and_stops(tmp_path):
    import os
    import signal

    from darknumba.train.rnn import RnnTrainOptions, train_char_rnn
    text = tmp_path / "t.txt"
    text.write_bytes(b"abc" * 50)

    def log(msg, file=None):
        if msg.startswith("3: "):
            os.kill(os.getpid(), signal.SIGINT)

    r = train_char_rnn(CFG, text, RnnTrainOptions(backup=str(tmp_path / "b"), max_batches=10),
                       log)
    assert r["interrupted"] and r["iterations"] == 3
    assert [os.path.basename(p) for p in r["written"]] == ["rnn-tiny.backup"]


def test_grammar(capsys, tmp_path):
    code, out, err = call(capsys, "rnn", "--help")
    assert code == 0 and all(c in out for c in ("train", "generate", "valid"))
    code, out, err = call(capsys, "rnn", "generate", "--help")
    for opt in ("-seed", "-len", "-temp", "-srand"):
        assert opt in out
    code, _, err = call(capsys, "rnn", "generate", CFG)                      # no weights
    assert code == 2 and "Missing argument 'weights'" in err
    code, _, err = call(capsys, "rnn", "train", CFG)                         # no text
    assert code == 2 and "no text file to learn" in err
    code, _, err = call(capsys, "rnn", "train", CFG, "t", "w", "-file", "t")  # both ways
    assert code == 2 and "-file" in err
    code, _, err = call(capsys, "rnn", "generate", CFG, "w", "-temp", 0)
    assert code == 2 and "above 0" in err
    code, _, err = call(capsys, "rnn", "generate", CFG, "w", "-len", -1)
    assert code == 2


def one_line_error(capsys, *args):
    code, out, err = call(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("darknumba: error: "), err
    return lines[0]


def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_bytes(b"abc\n")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert "empty.txt: the text file is empty" in one_line_error(capsys, "rnn", "train", CFG, empty)
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"ab\0c")
    assert "nul.txt: byte 2 is NUL" in one_line_error(capsys, "rnn", "train", CFG, nul)
    for missing in ("nope.cfg", "nope.txt", "nope.weights"):
        args = {"nope.cfg": (tmp_path / missing, text), "nope.txt": (CFG, tmp_path / missing),
                "nope.weights": (CFG, text, tmp_path / missing)}[missing]
        assert missing in one_line_error(capsys, "rnn", "train", *args)
    assert "nope.weights" in one_line_error(capsys, "rnn", "generate", CFG, tmp_path / "nope.weights")
    assert "nope.cfg" in one_line_error(capsys, "rnn", "valid", tmp_path / "nope.cfg", text)
    narrow = tmp_path / "narrow.cfg"
    narrow.write_text(CFG.read_text().replace("inputs=256", "inputs=128"))
    msg = one_line_error(capsys, "rnn", "train", narrow, text)
    assert "narrow.cfg" in msg and "inputs=128" in msg and "inputs=256" in msg
    short = tmp_path / "short.cfg"
    short.write_text(CFG.read_text().replace("output=256", "output=100"))
    msg = one_line_error(capsys, "rnn", "train", short, text)
    assert "short.cfg" in msg and "outputs 100 values" in msg


def test_valid_scores_like_one_pass_over_the_sequence(tmp_path, capsys):
    """`rnn valid`'s bits per character equal -mean log2 of the probabilities that a network
    unrolled over the whole sequence (seed and text, one test-mode pass) gives each next byte."""
    from darknumba.weights import save_weights
    seed, text = b"ab", b"abc ab\tcab"
    n = len(seed) + len(text) - 1
    cfg = tmp_path / "v.cfg"
    cfg.write_text(f"[net]\ninputs=256\nbatch=1\ntime_steps={n}\n[rnn]\noutput=8\n"
                   "activation=tanh\n[connected]\noutput=256\nactivation=linear\n[softmax]\n")
    whole = parse_network_cfg(cfg, seed=5)
    w = tmp_path / "v.weights"
    save_weights(whole, w)
    fed = np.frombuffer(seed + text[:-1], np.uint8)
    x = np.zeros((n, 256), np.float32)
    x[np.arange(n), fed] = 1
    p = whole.predict(x)[len(seed):][np.arange(len(text) - 1), np.frombuffer(text[1:], np.uint8)]
    bits = np.log2(p.astype(np.float64))
    words = 1 + sum(c in b" \t\n" for c in text[1:])
    (tmp_path / "t.txt").write_bytes(text)
    code, out, err = call(capsys, "rnn", "valid", cfg, w, tmp_path / "t.txt", "-seed", "ab")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == len(text) - 1
    f = lines[-1].split()
    assert f[0] == str(len(text) - 1) and f[1] == "BPC:"
    assert float(f[2]) == pytest.approx(-bits.mean(), abs=1e-4)
    assert float(f[4]) == pytest.approx(2 ** -bits.mean(), rel=1e-4)
    assert float(f[7]) == pytest.approx(2 ** (-bits.sum() / words), rel=1e-4)
    code, out, err = call(capsys, "rnn", "valid", cfg, w, tmp_path / "t.txt", "-seed", "ab",
                          "--log-every", 4)
    assert [l.split()[0] for l in out.splitlines()] == ["4", "8", "9"]


def test_alexeyab_dialect_keeps_its_printout_and_checkpoints(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_bytes(b"abc" * 50)
    backup = tmp_path / "b"
    code, out, err = call(capsys, "rnn", "train", CFG, text, "--max-batches", 21, "--backup",
                          backup, "--dialect", "alexeyab")
    assert code == 0, err
    assert "batch = 128, steps = 16, streams = 8, subdivisions = 1, text_size = 150" in out
    assert "Learning Rate: 0.1, Momentum: 0.9, Decay: 0.0005\n" in err
    assert err.count("rnn-tiny.backup") == 2                     # every 10 iterations
    assert sorted(p.name for p in backup.iterdir()) == ["rnn-tiny.backup",
                                                        "rnn-tiny_final.weights"]
