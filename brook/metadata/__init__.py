"""The cluster metadata as every process sees it, the controllers' and the tools' alike.

The home the brief gives the metadata image and its replay; for now it holds the digest that
says whether two copies of the metadata are equal (``digest``).
"""
