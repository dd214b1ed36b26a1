"""The image's lock files and the script that writes them (lock.py)."""
