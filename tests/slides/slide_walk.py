"""Stepping a built deck in the browser and judging what it showed.

``WALK`` runs in the page: from the first slide it calls ``Reveal.next()`` until the last slide's last
fragment, and at every stop records which code lines reveal.js marked as highlighted (the rows of the
code table with the ``highlight-line`` class, in the code block on show) and what does not fit the
16:9 slide. ``problems`` compares those stops with what the deck asked for (the build's manifest).
"""
from __future__ import annotations

import re

WIDTH, HEIGHT = 1280, 720

# The state of the slide on show: each code block's highlighted rows and texts, and what overflows.
MEASURE = """() => {
  const W = Reveal.getConfig().width, H = Reveal.getConfig().height;
  const slide = Reveal.getCurrentSlide();
  const code = Array.from(slide.querySelectorAll('pre.code')).map(pre => {
    // reveal clones a stepped block once per step; the last clone made visible is the one on show
    const blocks = Array.from(pre.querySelectorAll(':scope > code'));
    const shown = blocks.filter((b, i) => i === 0 || b.classList.contains('visible'));
    const current = shown[shown.length - 1];
    const rows = Array.from(current.querySelectorAll('table.hljs-ln tr'));
    return {
      highlighted: rows.flatMap((r, i) => r.classList.contains('highlight-line') ? [i + 1] : []),
      texts: rows.map(r => (r.querySelector('.hljs-ln-code') || r).textContent),
      morph_target: pre.hasAttribute('data-auto-animate-target'),
    };
  });
  const overflow = [];
  if (slide.scrollHeight > H + 1) overflow.push(`content ${slide.scrollHeight} px tall in a ${H} px slide`);
  if (slide.scrollWidth > W + 1) overflow.push(`content ${slide.scrollWidth} px wide in a ${W} px slide`);
  slide.querySelectorAll('pre.code > code').forEach(c => {
    const box = `${c.clientWidth} × ${c.clientHeight} px`;
    if (c.scrollWidth > c.clientWidth + 1) overflow.push(`a code line is cut (${c.scrollWidth} px wide in ${box})`);
    if (c.scrollHeight > c.clientHeight + 1) overflow.push(`code rows are cut (${c.scrollHeight} px tall in ${box})`);
  });
  // the file line sits at the bottom of the slide: nothing may run into it
  const where = slide.querySelector(':scope > .where');
  if (where) {
    const bottom = Math.max(0, ...Array.from(slide.children)
      .filter(e => e !== where && e.tagName !== 'ASIDE').map(e => e.getBoundingClientRect().bottom));
    if (bottom > where.getBoundingClientRect().top + 1) overflow.push('the content runs into the file line');
  }
  slide.querySelectorAll('img').forEach(img => {
    if (!img.complete || img.naturalWidth === 0) overflow.push(`image ${img.getAttribute('src')} did not load`);
  });
  const i = Reveal.getIndices();
  return {h: i.h, f: (i.f === undefined ? -1 : i.f), code, overflow};
}"""

WALK = """async (measure) => {
  const measureNow = eval(measure);
  // A morph marks its slide 'pending', then 'running' on the next frame: wait for that and for every CSS
  // transition in the slide to finish. A slide reached without a morph is not marked at all.
  const settle = async () => {
    const slide = Reveal.getCurrentSlide();
    for (let waited = 0; waited < 5000 && slide.dataset.autoAnimate; waited += 25) {
      const moving = slide.getAnimations({subtree: true}).some(a => a.playState === 'running');
      if (slide.dataset.autoAnimate === 'running' && !moving) return;
      await new Promise(done => setTimeout(done, 25));
    }
  };
  Reveal.slide(0, 0, -1);
  const stops = [];
  for (let guard = 0; guard < 10000; guard++) {
    // a morph animates the code's box from the previous slide's: measure where it lands
    await settle();
    stops.push(measureNow());
    if (Reveal.isLastSlide() && !Reveal.availableFragments().next) return stops;
    Reveal.next();
  }
  throw new Error('the deck never reached its last slide');
}"""


def _row_matches(text: str, patterns: list[str]) -> bool:
    return any(re.search(p, text) for p in patterns)


def overflow_problems(deck_name: str, stops: list[dict]) -> list[str]:
    return [f"{deck_name} slide {stop['h'] + 1} (fragment {stop['f']}): {issue}"
            for stop in stops for issue in stop["overflow"]]


def highlight_problems(where: str, steps: list[dict], seen: dict[int, dict]) -> list[str]:
    """One stepped slide: ``seen`` maps fragment index (-1: before the first step) to the stop recorded there."""
    found = []
    if sorted(seen) != list(range(-1, len(steps))):
        found.append(f"{where}: stepped through fragments {sorted(seen)}, expected -1..{len(steps) - 1}")
    if -1 in seen and seen[-1]["code"] and seen[-1]["code"][0]["highlighted"]:
        found.append(f"{where}: lines {seen[-1]['code'][0]['highlighted']} highlighted before the first step")
    for i, step in enumerate(steps):
        stop = seen.get(i)
        if stop is None or not stop["code"]:
            continue
        shown = stop["code"][0]
        if shown["highlighted"] != step["rows"]:
            found.append(f"{where}, step {i + 1} '{step['label']}': reveal highlights rows {shown['highlighted']}, "
                         f"the deck asked for {step['rows']}")
            continue
        texts = [shown["texts"][r - 1] for r in shown["highlighted"]]
        if not any(_row_matches(t, step["patterns"]) for t in texts):
            found.append(f"{where}, step {i + 1} '{step['label']}': no highlighted line matches {step['patterns']}")
        elif step["only_matches"] and not all(_row_matches(t, step["patterns"]) for t in texts):
            found.append(f"{where}, step {i + 1} '{step['label']}': a highlighted line matches none of "
                         f"{step['patterns']}")
    return found


def problems(deck: dict, stops: list[dict]) -> list[str]:
    """What the stops of one deck got wrong against its manifest entry; empty when all is well."""
    found = overflow_problems(deck["name"], stops)
    by_slide: dict[int, dict[int, dict]] = {}
    for stop in stops:
        by_slide.setdefault(stop["h"], {})[stop["f"]] = stop
    if sorted(by_slide) != list(range(deck["slide_count"])):
        found.append(f"{deck['name']}: the walk saw slides {sorted(by_slide)}, the deck has {deck['slide_count']}")
    for slide in deck["slides"]:
        where = f"{deck['name']} slide {slide['index'] + 1} ({slide.get('where', slide['kind'])})"
        if slide.get("steps"):
            found += highlight_problems(where, slide["steps"], by_slide.get(slide["index"], {}))
        is_second_of_morph = (slide["kind"] == "morph" and slide["index"] > 0
                              and deck["slides"][slide["index"] - 1].get("data_id") == slide.get("data_id"))
        if is_second_of_morph:
            arrived = by_slide.get(slide["index"], {}).get(-1)
            if not (arrived and arrived["code"] and arrived["code"][0]["morph_target"]):
                found.append(f"{where}: reveal did not animate the code from the previous slide (no morph)")
    return found
