"""--compat on the training commands reaches the network; a wrong value is refused."""
from typer.testing import CliRunner

from darknumba.cli import app


def test_compat_is_checked_and_passed_to_the_network(tmp_path, monkeypatch):
    import darknumba.train.detector as T
    seen = {}

    def fake_train(datacfg, cfgfile, opts, log):
        seen["compat"] = opts.compat
        return {"interrupted": False}
    monkeypatch.setattr(T, "train_detector", fake_train)
    data, cfg = tmp_path / "x.data", tmp_path / "x.cfg"
    data.write_text("classes=1\n")
    cfg.write_text("[net]\n")
    r = CliRunner().invoke(app, ["detector", "train", str(data), str(cfg), "--compat", "darknet-cpu"])
    assert r.exit_code == 0, r.output
    assert seen["compat"] == "darknet-cpu"
    r = CliRunner().invoke(app, ["detector", "train", str(data), str(cfg), "--compat", "pjreddie"])
    assert r.exit_code == 2 and "--compat takes darknet-cpu" in r.output


def test_compat_network_overwrites_1x1_input_gradient(tmp_path):
    import numpy as np

    import darknumba as dn
    from darknumba.train.detector import TrainOptions
    assert TrainOptions(compat="darknet-cpu").compat == "darknet-cpu"
    cfg = tmp_path / "n.cfg"
    cfg.write_text("[net]\nbatch=1\nwidth=4\nheight=4\nchannels=2\n[convolutional]\nfilters=2\n"
                   "size=1\nactivation=linear\n[convolutional]\nfilters=2\nsize=1\nactivation=linear\n")
    grads = {}
    for compat in (None, "darknet-cpu"):
        net = dn.parse_network_cfg(cfg, compat=compat)
        net.forward(np.ones((1, 2, 4, 4), np.float32), train=True)
        net.layers[0].delta[:] = 1.0          # as if something had already added to it
        net.layers[1].delta[:] = 1.0
        net.input, net.delta = net.layers[0].output, net.layers[0].delta
        net.layers[1].backward(net)
        grads[compat] = net.layers[0].delta.copy()
    np.testing.assert_allclose(grads[None] - 1.0, grads["darknet-cpu"], rtol=1e-6)
