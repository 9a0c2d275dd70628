"""What belongs to one lesson only: the capstone's probes (lesson 08, ``capstone``) and lesson 09's dataflow
machine (``dataflow``: the TT-Lang simulator and how the course runs on it; ``dst``: the DST register census;
``lesson09``: its checks; ``tt_answer``: reading a learner's TT-Lang answer).
"""
