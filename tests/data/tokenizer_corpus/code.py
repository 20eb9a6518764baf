#!/usr/bin/env python3
"""Docstring with "quotes" and 'apostrophes' — and an em dash."""
import math


class Point:
    def __init__(self, x: float, y: float) -> None:
        self.x, self.y = x, y   

    def norm(self):
        return math.hypot(self.x, self.y)  # it's 3.14159?


if __name__ == "__main__":
	p = Point(3, 4)
	print(f"{p.norm():.2f}", [i**2 for i in range(10)], {'a': 1, "b": [2, 3]})
    
