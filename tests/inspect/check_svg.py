#!/usr/bin/env python3
"""Checks an umpool-inspect memory map: well-formed SVG, one group per
device, each with one group per chunk state, and a legend of the five
states. Usage: check_svg.py FILE DEVICES"""
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
STATES = {"used", "cached", "free", "host", "nvme"}


def fail(msg):
    print("FAIL: %s" % msg)
    sys.exit(1)


def main():
    path, want = sys.argv[1], int(sys.argv[2])
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        fail("%s is not well-formed XML: %s" % (path, e))
    if root.tag != NS + "svg":
        fail("root element is %s, not svg" % root.tag)
    devices = [g for g in root.iter(NS + "g") if g.get("class") == "device"]
    if len(devices) != want:
        fail("%d device groups, expected %d" % (len(devices), want))
    for dev in devices:
        groups = [g for g in dev.iter(NS + "g") if g.get("class") == "state"]
        states = [g.get("data-state") for g in groups]
        if len(groups) != len(STATES) or set(states) != STATES:
            fail("%s: state groups %s" % (dev.get("id"), states))
        for g in groups:
            if not g.get("fill", "").startswith("#"):
                fail("%s: state %s has no colour" % (dev.get("id"),
                                                     g.get("data-state")))
        drawn = sum(len(g.findall(NS + "rect")) for g in groups)
        if drawn == 0:
            fail("%s: nothing drawn" % dev.get("id"))
    legend = [g for g in root.iter(NS + "g") if g.get("id") == "legend"]
    if len(legend) != 1 or len(legend[0].findall(NS + "rect")) != len(STATES):
        fail("no legend of the five states")
    print("svg ok: %d devices" % want)


main()
