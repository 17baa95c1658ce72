"""PyTorch modules of pfl's larger models, shared by scripts/make_fixtures.py
(the fixtures tests/test_model.c checks against) and bench/ (the PyTorch side
of the throughput benchmark), so both use one definition.

  ResNet18     torchvision.models.resnet18(num_classes=K), as PFLlib builds it
               (pfl's resnet18), or with cifar_stem the CIFAR variant
               (pfl's resnet18-cifar)
  CifarAlexNet FedALP's CIFAR-10 AlexNet as pfl's alexnet defines it
"""

import torch
import torch.nn as nn


class BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock (expansion 1), written out so the
    script needs only torch: the same modules, names and forward."""

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision.models.resnet18(num_classes=K) as PFLlib builds it (stem
    conv 7x7/2, BN, ReLU, max pool 3x3/2), or with cifar_stem the CIFAR
    variant (conv 3x3/1, no max pool): pfl's resnet18 and resnet18-cifar.
    When torchvision is installed, check_against_torchvision compares the
    state_dict with torchvision's own."""

    def __init__(self, in_ch=3, num_classes=10, cifar_stem=False):
        super().__init__()
        if cifar_stem:
            self.conv1 = nn.Conv2d(in_ch, 64, 3, 1, 1, bias=False)
        else:
            self.conv1 = nn.Conv2d(in_ch, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity() if cifar_stem else nn.MaxPool2d(3, 2, 1)
        widths, inplanes = (64, 128, 256, 512), 64
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(inplanes, w, stride), BasicBlock(w, w, 1)))
            inplanes = w
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def check_against_torchvision(model, num_classes):
    try:
        import torchvision
    except ImportError:
        return
    ref = torchvision.models.resnet18(num_classes=num_classes).state_dict()
    mine = model.state_dict()
    assert list(ref.keys()) == list(mine.keys()), "state_dict keys differ from torchvision's"
    assert all(ref[k].shape == mine[k].shape for k in ref), "state_dict shapes differ from torchvision's"


class CifarAlexNet(nn.Module):
    """FedALP's "AlexNet accustomed to CIFAR-10" (5 conv + 3 fc, widths not
    given): the CIFAR-10 AlexNet common in PyTorch code, pfl's alexnet."""

    def __init__(self, in_ch=3, num_classes=10, side=32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_ch, 64, kernel_size=3, stride=2, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(kernel_size=2),
            nn.Conv2d(64, 192, kernel_size=3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(kernel_size=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(kernel_size=2))
        s = ((side + 1) // 2) // 2 // 2 // 2  # conv stride 2 (padding 1), then three 2x2 pools
        self.classifier = nn.Sequential(
            nn.Dropout(), nn.Linear(256 * s * s, 4096), nn.ReLU(inplace=True),
            nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Linear(4096, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))
