"""The blocks of dtrain's ResNet-18/50 (src/dtrain/models/ResNet.cpp), for the PyTorch peers: torchvision's
layout (the stride on a bottleneck's 3x3), no bias in a convolution, a 1x1 projection on the shortcut where the
shape changes. Works under Debian's PyTorch 1.13 and under PyTorch 2.x."""
import torch.nn as nn
import torch.nn.functional as F


def conv(cin, cout, kernel, stride):
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1, self.bn1 = conv(cin, planes, 3, stride), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv(planes, planes, 3, 1), nn.BatchNorm2d(planes)
        self.shortcut = None
        if stride != 1 or cin != planes:
            self.shortcut = nn.Sequential(conv(cin, planes, 1, stride), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.shortcut(x) if self.shortcut is not None else x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride):
        super().__init__()
        out = planes * self.expansion
        self.conv1, self.bn1 = conv(cin, planes, 1, 1), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = conv(planes, planes, 3, stride), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = conv(planes, out, 1, 1), nn.BatchNorm2d(out)
        self.shortcut = None
        if stride != 1 or cin != out:
            self.shortcut = nn.Sequential(conv(cin, out, 1, stride), nn.BatchNorm2d(out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (self.shortcut(x) if self.shortcut is not None else x))
