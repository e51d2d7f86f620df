"""Small networks the tests share: a 32x32 yolo detector of two classes that a random
initialisation runs in milliseconds (used by the Detector API, video and evaluation tests)."""

SMALL_CFG = """[net]
width=32
height=32
channels=3

[convolutional]
filters=8
size=3
stride=2
pad=1
activation=leaky

[convolutional]
filters=21
size=1
stride=1
pad=0
activation=linear

[yolo]
mask=0,1,2
anchors=4,5, 8,9, 14,12
classes=2
num=3
"""
NAMES = ["ring", "block"]
