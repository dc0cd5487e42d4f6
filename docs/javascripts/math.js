// Typesets every formula of a page with the KaTeX shipped in vendor/katex/ (nothing is fetched
// from the web, so pages opened from disk show mathematics too). pymdownx.arithmatex (generic
// mode) turns $...$ into <span class="arithmatex">\(...\)</span> and $$...$$ into
// <div class="arithmatex">\[...\]</div>; a formula KaTeX cannot parse is shown as its source in
// red (.katex-error), which the site's browser test looks for.
function typesetFormulas(root) {
  for (const node of root.querySelectorAll(".arithmatex")) {
    const source = node.textContent.trim();
    katex.render(source.slice(2, -2), node, {
      displayMode: node.tagName === "DIV",
      throwOnError: false,
    });
  }
}

if (typeof document$ !== "undefined") {
  document$.subscribe(({ body }) => typesetFormulas(body));   // also after instant navigation
} else {
  typesetFormulas(document.body);
}
