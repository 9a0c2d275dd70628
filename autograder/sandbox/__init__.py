"""The sandbox submissions are graded in (bubblewrap): settings, the kernel command, exit reports."""
