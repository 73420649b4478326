// Injected into a copy of a report page by tests/browser/conftest.py: once the page has loaded (images
// included), measures what a reader sees and writes it as JSON into a new last element, pre#browser-check,
// which `chromium --dump-dom` prints. Page coordinates: the result does not depend on the window's height.
window.addEventListener("load", () => {
  const FOLD = 800; // the first screen: 1280 x 800
  const top = (el) => el.getBoundingClientRect().top + window.scrollY;
  const bottom = (el) => el.getBoundingClientRect().bottom + window.scrollY;
  const shown = (el) => el.getClientRects().length > 0 && el.getBoundingClientRect().height > 0;
  const loaded = (img) => img.complete && img.naturalWidth > 0;
  const name = (el) => (el.getAttribute("alt") || el.getAttribute("src") || el.tagName).slice(0, 80);
  const images = [...document.images];
  const firstScreenFigures = [
    ...images.filter((i) => shown(i) && top(i) < FOLD && loaded(i)).map(name),
    ...[...document.querySelectorAll("svg")].filter((s) => shown(s) && top(s) < FOLD).map(name),
  ];
  const firstScreenTables = [...document.querySelectorAll("table")].map((t) => ({
    rows: [...t.rows].filter((r) => shown(r) && top(r) < FOLD && bottom(r) > 0).length,
    text: t.innerText.slice(0, 80),
  }));
  const links = [...document.querySelectorAll("a[href]")];
  const result = {
    viewport: [window.innerWidth, window.innerHeight],
    images: images.length,
    firstScreenFigures,
    firstScreenTables: firstScreenTables.filter((t) => t.rows > 0),
    brokenImages: images.filter((i) => !loaded(i)).map(name),
    localFiles: links
      .filter((a) => a.protocol === "file:" && !a.getAttribute("href").startsWith("#"))
      .map((a) => decodeURIComponent(a.pathname)),
    otherLinks: links.filter((a) => !["file:"].includes(a.protocol)).map((a) => a.href),
    missingAnchors: links
      .map((a) => a.getAttribute("href"))
      .filter((h) => h.startsWith("#") && !document.getElementById(h.slice(1))),
  };
  const out = document.createElement("pre");
  out.id = "browser-check";
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
