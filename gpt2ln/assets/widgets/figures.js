/* gpt2ln live figures: plain JavaScript, no dependencies, no network.
 *
 * gpt2ln/widgets.py inlines this file into each figure's HTML output, followed by
 * `gpt2lnLib.mount(id, kind, data)`. The same file runs under node (module.exports)
 * so that tests can evaluate `compute[kind](data, inputs)`, the formulas the page uses,
 * and compare them with gpt2ln. Every figure writes its current inputs and outputs
 * to its root element's `data-state` attribute and to `window.gpt2lnFigures[id].state()`.
 */
(function () {
  "use strict";
  var VERSION = "2";

  // ---------------------------------------------------------------- math (pure)
  function sum(a) { var s = 0; for (var i = 0; i < a.length; i++) s += a[i]; return s; }
  function mean(a) { return sum(a) / a.length; }
  function variance(a, ddof) {
    var m = mean(a), s = 0;
    for (var i = 0; i < a.length; i++) s += (a[i] - m) * (a[i] - m);
    return s / (a.length - (ddof || 0));
  }
  function rms(a) { var s = 0; for (var i = 0; i < a.length; i++) s += a[i] * a[i]; return Math.sqrt(s / a.length); }
  function stats(a) { return {mean: mean(a), std: Math.sqrt(variance(a, 0)), rms: rms(a)}; }
  /** LayerNorm of one vector: (x - mean) / sqrt(var + eps), biased variance, no gain or bias. */
  function layerNorm(a, eps) {
    var m = mean(a), r = 1 / Math.sqrt(variance(a, 0) + eps);
    return a.map(function (v) { return (v - m) * r; });
  }
  /** RMSNorm of one vector: x / sqrt(mean(x^2) + eps), no gain. */
  function rmsNorm(a, eps) {
    var s = 0; for (var i = 0; i < a.length; i++) s += a[i] * a[i];
    var r = 1 / Math.sqrt(s / a.length + eps);
    return a.map(function (v) { return v * r; });
  }
  function dot(a, b) { var s = 0; for (var i = 0; i < a.length; i++) s += a[i] * b[i]; return s; }
  function softmax(z) {
    var m = Math.max.apply(null, z), e = z.map(function (v) { return Math.exp(v - m); }), s = sum(e);
    return e.map(function (v) { return v / s; });
  }
  /** Entropy in nats, with 0 ln 0 = 0. */
  function entropy(p) { var h = 0; for (var i = 0; i < p.length; i++) if (p[i] > 0) h -= p[i] * Math.log(p[i]); return h; }
  function argmax(a) { var k = 0; for (var i = 1; i < a.length; i++) if (a[i] > a[k]) k = i; return k; }
  function maxAbsDiff(a, b) { var m = 0; for (var i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i])); return m; }

  /** Chapter 2's classic mistakes, each applied to the reader's token (row 0 of `rows`). */
  var MISTAKES = {
    none: {label: "none"},
    eps_outside: {
      label: "ε outside the root: (x − μ) / (σ + ε)",
      f: function (rows, eps) {
        var a = rows[0], m = mean(a), s = Math.sqrt(variance(a, 0));
        return a.map(function (v) { return (v - m) / (s + eps); });
      },
    },
    bessel: {
      label: "Bessel's d − 1 in the variance",
      f: function (rows, eps) {
        var a = rows[0], m = mean(a), r = 1 / Math.sqrt(variance(a, 1) + eps);
        return a.map(function (v) { return (v - m) * r; });
      },
    },
    wrong_axis: {
      label: "wrong axis: statistics over the batch, not the features",
      f: function (rows, eps) {
        return rows[0].map(function (v, j) {
          var col = rows.map(function (r) { return r[j]; });
          return (v - mean(col)) / Math.sqrt(variance(col, 0) + eps);
        });
      },
    },
  };

  /** The norms QK-norm can apply to each query and key (gain 1, bias 0). */
  var QK_NORMS = {
    rms_norm: {label: "RMSNorm", who: "as Gemma 3, OLMo 2 and Qwen 3", f: rmsNorm},
    layer_norm: {label: "LayerNorm", who: "as ViT-22B", f: layerNorm},
  };

  var compute = {
    /** inputs {x, scale, shift, mistake} -> the three panels, their statistics, the mistake's error. */
    norm_explorer: function (data, inp) {
      var y = inp.x.map(function (v) { return inp.scale * v + inp.shift; });
      var ln = layerNorm(y, data.eps_ln), rn = rmsNorm(y, data.eps_rms);
      var out = {
        input: y, layer_norm: ln, rms_norm: rn,
        stats: {input: stats(y), layer_norm: stats(ln), rms_norm: stats(rn)},
        clipped: [],
        mistake: null,
      };
      y.forEach(function (v, i) { if (Math.abs(v) > data.input_lim) out.clipped.push(i); });
      var mk = MISTAKES[inp.mistake];
      if (!mk) throw new Error("unknown mistake " + inp.mistake);
      if (mk.f) {
        var rows = [y].concat(data.others);
        var wrong = mk.f(rows, data.eps_ln);
        out.mistake = {name: inp.mistake, output: wrong, max_error: maxAbsDiff(wrong, ln)};
      }
      return out;
    },
    /** inputs {scale, norm} -> one softmax row without and with QK-norm (norm: "rms_norm" or "layer_norm"). */
    qk_norm: function (data, inp) {
      var s = inp.scale, D = data.q.length, c = 1 / Math.sqrt(D), norm = inp.norm || data.norm;
      if (!QK_NORMS[norm]) throw new Error("unknown norm " + norm);
      var f = QK_NORMS[norm].f;
      var q = data.q.map(function (v) { return s * v; });
      var ks = data.keys.map(function (k) { return k.map(function (v) { return s * v; }); });
      var qh = f(q, data.eps);
      function row(scores) {
        var p = softmax(scores), k = argmax(p);
        return {scores: scores, weights: p, entropy: entropy(p), max_weight: p[k], argmax: k,
                max_abs_score: Math.max.apply(null, scores.map(Math.abs))};
      }
      return {
        norm: norm,
        plain: row(ks.map(function (k) { return dot(q, k) * c; })),
        qk_norm: row(ks.map(function (k) { return dot(qh, f(k, data.eps)) * c; })),
        uniform_entropy: Math.log(ks.length),
      };
    },
    /** inputs {position, selected} -> the layout of that block and the selected component. */
    block_diagram: function (data, inp) {
      var layout = data.layouts[inp.position];
      if (!layout) throw new Error("unknown position " + inp.position);
      var names = [];
      layout.steps.forEach(function (st) { (st.branch || [st.node]).forEach(function (n) { names.push(n); }); });
      if (layout.final_norm) names.push("ln_f");
      var norms = names.filter(function (n) { return data.components[n].is_norm; });
      var perBlock = sum(norms.filter(function (n) { return n !== "ln_f"; }).map(function (n) { return data.components[n].params; }));
      return {
        order: names,
        norm_params_per_block: perBlock,
        norm_params_all_blocks: perBlock * data.n_layer,
        norm_params_total: perBlock * data.n_layer + (layout.final_norm ? data.components.ln_f.params : 0),
        selected: inp.selected && names.indexOf(inp.selected) >= 0 ? data.components[inp.selected] : null,
      };
    },
    /** inputs {prompt, token} -> the norms and the logit lens of that token. */
    residual_lens: function (data, inp) {
      var pr = data.prompts[inp.prompt];
      if (!pr || inp.token < 0 || inp.token >= pr.tokens.length) throw new Error("no such prompt/token");
      var t = inp.token;
      return {
        text: pr.text, token: pr.tokens[t], context: pr.tokens.slice(0, t + 1).join(""),
        norms: pr.norms[t], norm_after_ln_f: pr.lnf[t], top: pr.top[t], p_top: pr.p[t],
        model_prediction: pr.top[t][pr.top[t].length - 1],
      };
    },
  };

  var G = {
    version: VERSION,
    math: {mean: mean, variance: variance, rms: rms, stats: stats, layerNorm: layerNorm, rmsNorm: rmsNorm,
           softmax: softmax, entropy: entropy, dot: dot, maxAbsDiff: maxAbsDiff},
    mistakes: MISTAKES,
    qkNorms: QK_NORMS,
    compute: compute,
  };

  if (typeof window === "undefined" && typeof module === "object" && module.exports) { module.exports = G; return; }
  if (typeof window === "undefined") return;

  // ---------------------------------------------------------------- DOM helpers
  var SVGNS = "http://www.w3.org/2000/svg";
  function el(tag, attrs, parent, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function sv(tag, attrs, parent, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }
  function f3(v) { var s = v.toFixed(3); return s === "-0.000" ? "0.000" : s; }
  function fe(v) { return v.toExponential(2); }
  function short(v) { return v < 1e5 ? int(v) : (v / 1e6).toFixed(2) + "M"; }
  function int(v) { return Math.round(v).toLocaleString("en-US"); }
  function slider(parent, label, min, max, step, value, fmt, role) {
    var wrap = el("label", {"class": "g2-slider"}, parent);
    el("span", {"class": "g2-slider-name"}, wrap, label);
    var input = el("input", {type: "range", min: min, max: max, step: step, value: value, "data-role": role}, wrap);
    input.setAttribute("aria-label", label);
    var out = el("output", {"class": "g2-readout", "data-role": role + "-readout"}, wrap);
    var update = function () { out.textContent = fmt(parseFloat(input.value)); };
    update();
    input.addEventListener("input", update);
    return input;
  }
  /** Record the figure's current inputs and outputs on its root element (data-state). */
  function publish(body, inputs, outputs) {
    var fig = body.closest(".gpt2ln-fig") || body;
    var st = {kind: fig.getAttribute("data-kind"), inputs: JSON.parse(JSON.stringify(inputs)), outputs: outputs};
    fig.setAttribute("data-state", JSON.stringify(st));
    return st;
  }

  /** A bar chart in an SVG on [-lim, lim], redrawn in place by update(values, lim, overlay).
   * Bars beyond the axis are drawn to its edge and marked by a triangle pointing off the chart
   * (data-clipped="true"). With opts.interactive the bars are sliders (role="slider",
   * tabindex 0, aria-valuenow): the figure handles their keys; the SVG is then a group, not
   * an image, since an image cannot hold interactive children. */
  function barChart(parent, opts) {
    var W = 240, H = 180, L = 30, R = 4, T = 20, B = 20;
    var svg = sv("svg", {viewBox: "0 0 " + W + " " + H, "class": "g2-chart", role: opts.interactive ? "group" : "img",
                         "aria-label": opts.title, "data-role": opts.role}, parent);
    var n = opts.n, bw = (W - L - R) / n, lim = 1;
    function y(v) { return T + (H - T - B) * (lim - v) / (2 * lim); }
    sv("text", {x: L, y: 14, "class": "g2-title", "aria-hidden": "true"}, svg, opts.title);
    var axis = sv("g", {"aria-hidden": "true"}, svg);
    sv("text", {x: (L + W - R) / 2, y: H - 4, "class": "g2-tick", "text-anchor": "middle", "aria-hidden": "true"}, svg, "feature i");
    var bars = [], marks = [], clips = [];
    for (var i = 0; i < n; i++) {
      var attrs = {x: L + i * bw + 1, width: Math.max(1, bw - 2), "class": "g2-bar " + opts.cls, "data-i": i};
      if (opts.interactive) {
        attrs.tabindex = 0; attrs.role = "slider"; attrs["aria-label"] = "feature " + i + " of the input";
        attrs["aria-orientation"] = "vertical";
      }
      bars.push(sv("rect", attrs, svg));
      marks.push(sv("line", {x1: L + i * bw, x2: L + (i + 1) * bw, "class": "g2-overlay", "aria-hidden": "true"}, svg));
      clips.push(sv("path", {"class": "g2-clip", "data-i": i, "aria-hidden": "true"}, svg));
    }
    function update(values, newLim, overlay) {
      lim = newLim;
      clear(axis);
      [-lim, -lim / 2, 0, lim / 2, lim].forEach(function (t) {
        sv("line", {x1: L, x2: W - R, y1: y(t), y2: y(t), "class": t === 0 ? "g2-zero" : "g2-grid"}, axis);
        sv("text", {x: L - 4, y: y(t) + 3, "class": "g2-tick", "text-anchor": "end"}, axis, (+t.toPrecision(3)).toString());
      });
      values.forEach(function (v, i) {
        var c = Math.max(-lim, Math.min(lim, v)), clipped = Math.abs(v) > lim;
        bars[i].setAttribute("y", Math.min(y(0), y(c)));
        bars[i].setAttribute("height", Math.max(0.5, Math.abs(y(c) - y(0))));
        bars[i].setAttribute("data-value", v);
        bars[i].setAttribute("data-clipped", clipped ? "true" : "false");
        if (opts.interactive) {
          bars[i].setAttribute("aria-valuenow", +v.toFixed(4));
          bars[i].setAttribute("aria-valuemin", +Math.min(-lim, v).toFixed(4));
          bars[i].setAttribute("aria-valuemax", +Math.max(lim, v).toFixed(4));
          bars[i].setAttribute("aria-valuetext", f3(v) + (clipped ? " (beyond the axis, clipped)" : ""));
        }
        clips[i].style.display = clipped ? "" : "none";
        if (clipped) {  // a triangle at the edge, pointing the way the bar goes on
          var xm = L + (i + 0.5) * bw, hw = Math.min(5, bw / 2 - 1), e = v > 0 ? T : H - B, d = v > 0 ? -6 : 6;
          clips[i].setAttribute("d", "M" + (xm - hw) + "," + e + " L" + (xm + hw) + "," + e + " L" + xm + "," + (e + d) + " Z");
        }
        var m = overlay ? Math.max(-lim, Math.min(lim, overlay[i])) : null;
        marks[i].style.display = overlay ? "" : "none";
        if (overlay) { marks[i].setAttribute("y1", y(m)); marks[i].setAttribute("y2", y(m)); }
      });
    }
    return {
      svg: svg, update: update, bars: bars,
      valueAt: function (clientY) {
        var r = svg.getBoundingClientRect(), py = (clientY - r.top) * H / r.height;
        return Math.max(-lim, Math.min(lim, lim - (py - T) * 2 * lim / (H - T - B)));
      },
      barAt: function (clientX) {
        var r = svg.getBoundingClientRect(), px = (clientX - r.left) * W / r.width;
        return Math.max(0, Math.min(n - 1, Math.floor((px - L) / bw)));
      },
    };
  }

  // ---------------------------------------------------------------- norm explorer
  function mountNormExplorer(root, id, data) {
    var inputs = {x: data.x.slice(), scale: data.scale, shift: data.shift, mistake: data.mistake};
    var controls = el("div", {"class": "g2-controls"}, root);
    var scaleIn = slider(controls, "scale", Math.log10(data.scale_range[0]), Math.log10(data.scale_range[1]), 0.01,
                         Math.log10(inputs.scale), function (v) { return Math.pow(10, v).toFixed(2); }, "scale");
    var shiftIn = slider(controls, "shift", data.shift_range[0], data.shift_range[1], 0.1, inputs.shift,
                         function (v) { return (v >= 0 ? "+" : "") + v.toFixed(1); }, "shift");
    var mwrap = el("label", {"class": "g2-select"}, controls);
    el("span", {}, mwrap, "show a mistake ");
    var msel = el("select", {"data-role": "mistake"}, mwrap);
    Object.keys(MISTAKES).forEach(function (k) { el("option", {value: k}, msel, MISTAKES[k].label); });
    msel.value = inputs.mistake;
    var reset = el("button", {type: "button", "data-role": "reset"}, controls, "reset");
    el("div", {"class": "g2-hint"}, root, "Drag the gray bars up or down to change one feature of the token " +
       "(or focus one with Tab and use the arrow keys). The input axis stays fixed, so the bars grow and " +
       "shrink with the scale; a triangle marks a bar that runs off the axis.");
    var panels = el("div", {"class": "g2-panels"}, root);
    var clipNote = el("div", {"class": "g2-hint", "data-role": "clip-note", "aria-live": "polite"}, root);
    var note = el("div", {"class": "g2-note", "data-role": "mistake-note"}, root);
    var dragging = null, lim = data.input_lim;
    var specs = [
      ["input", "input: scale · x + shift", "g2-input"],
      ["layer_norm", "after LayerNorm", "g2-ln"],
      ["rms_norm", "after RMSNorm", "g2-rms"],
    ];
    var charts = specs.map(function (sp, i) {
      var box = el("div", {"class": "g2-panel", "data-panel": sp[0]}, panels);
      var ch = barChart(box, {n: data.x.length, title: sp[1], cls: sp[2], role: sp[0], interactive: i === 0});
      var st = el("div", {"class": "g2-stats"}, box);
      ch.stats = ["mean", "std", "RMS"].map(function (k) { return el("span", {"data-stat": k.toLowerCase()}, st); });
      return ch;
    });

    function render() {
      var out = compute.norm_explorer(data, inputs);
      specs.forEach(function (sp, i) {
        var overlay = sp[0] === "layer_norm" && out.mistake ? out.mistake.output : null;
        charts[i].update(out[sp[0]], i === 0 ? lim : 4, overlay);
        var s = out.stats[sp[0]];
        charts[i].stats[0].textContent = "mean " + f3(s.mean);
        charts[i].stats[1].textContent = "std " + f3(s.std);
        charts[i].stats[2].textContent = "RMS " + f3(s.rms);
      });
      clipNote.textContent = out.clipped.length ? out.clipped.length + " of " + data.x.length +
        " input bars run off the axis (\u00b1" + lim + ") and are clipped: features " + out.clipped.join(", ") + "." : "";
      if (out.mistake) {
        note.textContent = "Red lines: LayerNorm with the mistake \u201c" + MISTAKES[out.mistake.name].label +
          "\u201d. Largest error against the correct output: ";
        el("b", {"data-role": "mistake-error"}, note, fe(out.mistake.max_error));
      } else {
        note.textContent = "Pick a mistake to see how far it moves LayerNorm's output.";
      }
      api.current = publish(root, inputs, out);
    }
    var input = charts[0];
    input.svg.classList.add("g2-draggable");
    /** Feature i's input bar to show the value v: x_i = (v - shift) / scale. */
    function setBar(i, v) { inputs.x[i] = (v - inputs.shift) / inputs.scale; render(); }
    function drag(ev) { setBar(dragging, input.valueAt(ev.clientY)); }
    function stop() {
      if (dragging === null) return;
      dragging = null;
      window.removeEventListener("pointermove", drag);
      window.removeEventListener("pointerup", stop);
    }
    input.svg.addEventListener("pointerdown", function (ev) {
      dragging = input.barAt(ev.clientX);
      input.bars[dragging].focus({preventScroll: true});
      drag(ev);
      window.addEventListener("pointermove", drag);
      window.addEventListener("pointerup", stop);
      ev.preventDefault();
    });
    // The keyboard, as the ARIA slider pattern: up/right +1 step, down/left -1, PageUp/PageDown
    // 10 steps, Home/End the axis's ends; a step is 1/40 of the axis. A bar beyond the axis moves
    // back towards it.
    input.bars.forEach(function (bar, i) {
      bar.addEventListener("keydown", function (ev) {
        var step = lim / 20, v = inputs.scale * inputs.x[i] + inputs.shift, lo = Math.min(-lim, v), hi = Math.max(lim, v);
        var moves = {ArrowUp: step, ArrowRight: step, ArrowDown: -step, ArrowLeft: -step, PageUp: 10 * step, PageDown: -10 * step};
        var nv;
        if (ev.key in moves) nv = v + moves[ev.key];
        else if (ev.key === "Home") nv = -lim;
        else if (ev.key === "End") nv = lim;
        else return;
        ev.preventDefault();
        setBar(i, Math.max(lo, Math.min(hi, nv)));
      });
    });
    scaleIn.addEventListener("input", function () { inputs.scale = Math.pow(10, parseFloat(scaleIn.value)); render(); });
    shiftIn.addEventListener("input", function () { inputs.shift = parseFloat(shiftIn.value); render(); });
    msel.addEventListener("change", function () { inputs.mistake = msel.value; render(); });
    reset.addEventListener("click", function () {
      inputs = {x: data.x.slice(), scale: data.scale, shift: data.shift, mistake: data.mistake};
      scaleIn.value = Math.log10(inputs.scale); shiftIn.value = inputs.shift; msel.value = inputs.mistake;
      scaleIn.dispatchEvent(new Event("input")); shiftIn.dispatchEvent(new Event("input"));
      render();
    });
    var api = {set: function (patch) { for (var k in patch) inputs[k] = patch[k]; render(); }};
    render();
    return api;
  }

  // ---------------------------------------------------------------- QK-norm
  function mountQKNorm(root, id, data) {
    var inputs = {scale: data.scale, norm: data.norm};
    var controls = el("div", {"class": "g2-controls"}, root);
    var sIn = slider(controls, "scale s of q and k", Math.log10(data.scale_range[0]), Math.log10(data.scale_range[1]),
                     0.01, Math.log10(inputs.scale), function (v) { return Math.pow(10, v).toFixed(2); }, "scale");
    var group = el("div", {"class": "g2-radios", role: "radiogroup", "aria-label": "QK-norm applies"}, controls);
    el("span", {}, group, "QK-norm applies ");
    Object.keys(QK_NORMS).forEach(function (k) {
      var lab = el("label", {}, group);
      var r = el("input", {type: "radio", name: id + "-norm", value: k, "data-role": "norm"}, lab);
      if (k === inputs.norm) r.checked = true;
      el("span", {}, lab, " " + QK_NORMS[k].label + " (" + QK_NORMS[k].who + ") ");
      r.addEventListener("change", function () { if (r.checked) { inputs.norm = k; render(); } });
    });
    var panels = el("div", {"class": "g2-panels"}, root);
    var qnote = el("div", {"class": "g2-note"}, root);
    function chart(box, r, title, cls) {
      var W = 300, H = 190, L = 36, R = 6, T = 22, B = 22, n = r.weights.length, bw = (W - L - R) / n;
      var svg = sv("svg", {viewBox: "0 0 " + W + " " + H, "class": "g2-chart", role: "img", "aria-label": title}, box);
      function y(v) { return T + (H - T - B) * (1 - v); }
      sv("text", {x: L, y: 14, "class": "g2-title"}, svg, title);
      [0, 0.25, 0.5, 0.75, 1].forEach(function (t) {
        sv("line", {x1: L, x2: W - R, y1: y(t), y2: y(t), "class": t === 0 ? "g2-zero" : "g2-grid"}, svg);
        sv("text", {x: L - 4, y: y(t) + 3, "class": "g2-tick", "text-anchor": "end"}, svg, String(t));
      });
      sv("text", {x: (L + W - R) / 2, y: H - 4, "class": "g2-tick", "text-anchor": "middle"}, svg, "key j");
      r.weights.forEach(function (p, j) {
        sv("rect", {x: L + j * bw + 1, width: bw - 2, y: y(p), height: y(0) - y(p), "class": "g2-bar " + cls, "data-j": j}, svg);
      });
    }
    function render() {
      var out = compute.qk_norm(data, inputs);
      clear(panels);
      var name = QK_NORMS[out.norm].label;
      [["plain", "no QK-norm: softmax(q·k / √D)", "g2-input"], ["qk_norm", "with QK-norm: " + name + " of q and of k", "g2-ln"]]
        .forEach(function (sp) {
          var box = el("div", {"class": "g2-panel", "data-panel": sp[0]}, panels), r = out[sp[0]];
          chart(box, r, sp[1], sp[2]);
          var st = el("div", {"class": "g2-stats"}, box);
          el("span", {"data-stat": "entropy"}, st, "entropy " + f3(r.entropy) + " nats");
          el("span", {"data-stat": "max_weight"}, st, "largest weight " + f3(r.max_weight));
          el("span", {"data-stat": "max_abs_score"}, st, "max |score| " + f3(r.max_abs_score));
        });
      qnote.textContent = "Uniform attention over the " + data.keys.length + " keys has entropy ln " + data.keys.length +
        " = " + f3(out.uniform_entropy) + " nats; one-hot attention has 0. QK-norm here: " + name +
        " of each query and each key over its D = " + data.q.length + " features, gain 1" +
        (out.norm === "layer_norm" ? " and bias 0" : "") + ", \u03b5 = " + data.eps.toExponential() + "." +
        (out.norm === "rms_norm" ? " Gemma 3 and Qwen 3 normalize each head like this; OLMo 2 normalizes all " +
         "heads' queries (and keys) together, over n_head \u00b7 D features." : "");
      api.current = publish(root, inputs, out);
    }
    sIn.addEventListener("input", function () { inputs.scale = Math.pow(10, parseFloat(sIn.value)); render(); });
    var api = {set: function (patch) {
      for (var k in patch) inputs[k] = patch[k];
      group.querySelectorAll("input").forEach(function (r) { r.checked = r.value === inputs.norm; });
      render();
    }};
    render();
    return api;
  }

  // ---------------------------------------------------------------- block diagram
  function mountBlockDiagram(root, id, data) {
    var inputs = {position: data.position, selected: data.selected};
    var controls = el("div", {"class": "g2-controls g2-radios", role: "radiogroup", "aria-label": "norm placement"}, root);
    data.positions.forEach(function (p) {
      var lab = el("label", {}, controls);
      var r = el("input", {type: "radio", name: id + "-position", value: p, "data-role": "position"}, lab);
      if (p === inputs.position) r.checked = true;
      el("span", {}, lab, " " + data.layouts[p].label);
      r.addEventListener("change", function () { if (r.checked) { inputs.position = p; render(); } });
    });
    var formula = el("div", {"class": "g2-formula", "data-role": "formula"}, root);
    var holder = el("div", {"class": "g2-diagram"}, root);
    var info = el("div", {"class": "g2-info", "data-role": "info", "aria-live": "polite"}, root);
    var totals = el("div", {"class": "g2-stats", "data-role": "totals"}, root);
    var dnote = el("div", {"class": "g2-hint", "data-role": "dropout-note"}, root,
      "Dashed boxes: residual dropout on each sub-layer's output before the sum, p_resid = " + data.resid_pdrop +
      " in GPT-2's training; off at eval (nn.Dropout is the identity after model.eval()). This model's dropout: " +
      data.dropout + ".");
    function isDrop(name) { return /dropout$/.test(name); }

    function box(svg, x, y, w, h, name) {
      var c = data.components[name], drop = isDrop(name);
      var cls = "g2-comp" + (c.is_norm ? " g2-norm" : "") + (drop ? " g2-drop" : "") +
        (inputs.selected === name ? " g2-selected" : "");
      var sub = drop ? "p " + data.resid_pdrop + ", train" : short(c.params) + " params";
      // A button inside a group (not an image, which cannot hold interactive children).
      var g = sv("g", {"class": cls, "data-component": name, tabindex: 0, role: "button",
                       "aria-pressed": inputs.selected === name ? "true" : "false",
                       "aria-label": name + (drop ? ": dropout, p " + data.resid_pdrop + " in training, off at eval"
                                                  : ": " + int(c.params) + " parameters")}, svg);
      sv("rect", {x: x, y: y, width: w, height: h, rx: 6}, g);
      var label = sv("text", {x: x + w / 2, y: y + h / 2 - 2, "text-anchor": "middle", "class": "g2-comp-name", "aria-hidden": "true"},
                     g, drop ? "dropout" : name);
      if (!drop && name.length > 8) label.style.fontSize = "11px";
      sv("text", {x: x + w / 2, y: y + h / 2 + 12, "text-anchor": "middle", "class": "g2-comp-params", "aria-hidden": "true"}, g, sub);
      var pick = function () { inputs.selected = name; render(); };
      g.addEventListener("click", pick);
      g.addEventListener("keydown", function (ev) { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); pick(); } });
      return g;
    }
    function render() {
      var out = compute.block_diagram(data, inputs), layout = data.layouts[inputs.position];
      var active = document.activeElement, refocus = active && holder.contains(active) ? active.getAttribute("data-component") : null;
      formula.textContent = layout.formula;
      clear(holder);
      var BW = 88, DW = 66, BH = 42, GAP = 10, yS = 150, yB = 62;
      function wOf(name) { return isDrop(name) ? DW : BW; }
      function area(br) {  // the room of a branch's boxes, at least two full boxes wide, with a trailing gap
        var w = -GAP; br.forEach(function (n) { w += wOf(n) + GAP; });
        return Math.max(w, 2 * BW + GAP) + GAP;
      }
      var width = 40;
      layout.steps.forEach(function (st) { width += st.branch ? area(st.branch) + 2 * GAP + 30 : BW + 2 * GAP; });
      width += layout.final_norm ? BW + 4 * GAP + 60 : 60;
      var svg = sv("svg", {viewBox: "0 30 " + width + " 172", "class": "g2-block", role: "group",
                           "aria-label": layout.label + " block diagram: " + out.order.join(", ")}, holder);
      var defs = sv("defs", {}, svg);
      var mk = sv("marker", {id: id + "-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 9, markerHeight: 9,
                              markerUnits: "userSpaceOnUse", orient: "auto"}, defs);
      sv("path", {d: "M0,0 L10,5 L0,10 z", "class": "g2-arrowhead"}, mk);
      var arrow = "url(#" + id + "-arrow)";
      var x = 10;
      sv("text", {x: x, y: yS - 8, "class": "g2-tick"}, svg, "x");
      var blockStart = x;
      layout.steps.forEach(function (st) {
        if (st.branch) {
          var split = x + GAP, room = area(st.branch), used = -GAP;
          st.branch.forEach(function (n) { used += wOf(n) + GAP; });
          var bx = split + GAP + (room - GAP - used) / 2;
          var end = split + GAP + room, add = end + 12;
          sv("path", {d: "M" + split + "," + yS + " L" + split + "," + (yB + BH / 2) + " L" + bx + "," + (yB + BH / 2), "class": "g2-wire", "marker-end": arrow}, svg);
          var bx_i = bx;
          st.branch.forEach(function (name, i) {
            if (i > 0) sv("line", {x1: bx_i - GAP, x2: bx_i, y1: yB + BH / 2, y2: yB + BH / 2, "class": "g2-wire", "marker-end": arrow}, svg);
            box(svg, bx_i, yB, wOf(name), BH, name);
            bx_i += wOf(name) + GAP;
          });
          var last = bx_i - GAP;
          sv("path", {d: "M" + last + "," + (yB + BH / 2) + " L" + add + "," + (yB + BH / 2) + " L" + add + "," + (yS - 11),
                      "class": "g2-wire", "marker-end": arrow}, svg);
          var bypass = sv("line", {x1: x, x2: add - 11, y1: yS, y2: yS, "class": "g2-bypass", "marker-end": arrow}, svg);
          bypass.setAttribute("data-role", "bypass");
          sv("text", {x: (split + add) / 2, y: yS + 18, "text-anchor": "middle", "class": "g2-bypass-label"}, svg,
             st.alpha ? "bypass × α = " + data.deepnorm_alpha.toFixed(3) : "residual bypass");
          sv("circle", {cx: add, cy: yS, r: 11, "class": "g2-add"}, svg);
          sv("text", {x: add, y: yS + 5, "text-anchor": "middle", "class": "g2-add-sign"}, svg, "+");
          x = add + 11;
        } else {
          var nx = x + GAP;
          sv("line", {x1: x, x2: nx, y1: yS, y2: yS, "class": "g2-wire", "marker-end": arrow}, svg);
          box(svg, nx, yS - BH / 2, BW, BH, st.node);
          x = nx + BW;
        }
      });
      sv("rect", {x: blockStart - 4, y: 36, width: x - blockStart + 8, height: 160, rx: 10, "class": "g2-blockframe"}, svg);
      sv("text", {x: blockStart + 4, y: 50, "class": "g2-tick"}, svg, "one block (× " + data.n_layer + ")");
      if (layout.final_norm) {
        var fx = x + 3 * GAP;
        sv("line", {x1: x, x2: fx, y1: yS, y2: yS, "class": "g2-wire", "marker-end": arrow}, svg);
        box(svg, fx, yS - BH / 2, BW, BH, "ln_f");
        x = fx + BW;
      }
      sv("line", {x1: x, x2: x + 30, y1: yS, y2: yS, "class": "g2-wire", "marker-end": arrow}, svg);
      sv("text", {x: x + 6, y: yS - 8, "class": "g2-tick"}, svg, layout.final_norm ? "to wte.T" : "out");
      if (refocus) {
        var again = holder.querySelector('[data-component="' + refocus + '"]');
        if (again) again.focus();
      }

      clear(info);
      var c = out.selected;
      if (c) {
        el("b", {}, info, c.name + ": ");
        el("span", {}, info, c.what + " ");
        el("span", {"data-role": "shapes"}, info, "Shapes " + c.shape_in + " → " + c.shape_out + ". ");
        el("span", {"data-role": "params"}, info, "Parameters: " + int(c.params) + (c.name === "ln_f" ? "" :
           " per block, " + int(c.params * data.n_layer) + " in all " + data.n_layer + " blocks") + ". ");
        var a = el("a", {href: linkFor(c.link), "data-role": "link"}, info, c.link_lead + " " + c.link_text + ".");
        a.setAttribute("title", c.link_text);
      } else {
        info.textContent = "Click a component (or focus it with Tab and press Enter) to see its shapes, its parameters " +
          "and where the course builds it.";
      }
      totals.textContent = "Norm parameters: " + int(out.norm_params_per_block) + " per block, " +
        int(out.norm_params_all_blocks) + " in " + data.n_layer + " blocks" +
        (layout.final_norm ? ", " + int(out.norm_params_total) + " with ln_f." : " (no ln_f).");
      api.current = publish(root, inputs, out);
    }
    function linkFor(href) {
      // In Jupyter the neighbouring chapters are notebooks, on the website pages.
      var page = window.location.pathname;
      return /\.html?$/.test(page) || page.endsWith("/") ? href : href.replace(/\.html(#|$)/, ".ipynb$1");
    }
    var api = {set: function (patch) { for (var k in patch) inputs[k] = patch[k]; render(); }};
    render();
    return api;
  }

  // ---------------------------------------------------------------- residual stream and logit lens
  function niceStep(x) {
    var p = Math.pow(10, Math.floor(Math.log10(x))), m = x / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  function shown(tok) { return tok === " " ? "␣" : tok === "\n" ? "↵" : tok; }
  /** Text in quotes as the reader should see it: a new line as ↵ (JSON.stringify would print \n). */
  function quoted(text) { return "\u201c" + text.replace(/\r?\n/g, "↵") + "\u201d"; }
  function mountResidualLens(root, id, data) {
    var inputs = {prompt: data.prompt, token: data.token};
    var controls = el("div", {"class": "g2-controls"}, root);
    var pwrap = el("label", {"class": "g2-select"}, controls);
    el("span", {}, pwrap, "prompt ");
    var psel = el("select", {"data-role": "prompt"}, pwrap);
    data.prompts.forEach(function (p, i) { el("option", {value: i}, psel, p.text.replace(/\n/g, " ↵ ")); });
    psel.value = String(inputs.prompt);
    var chips = el("div", {"class": "g2-chips", "data-role": "tokens"}, root);
    var panels = el("div", {"class": "g2-panels g2-two"}, root);
    function render() {
      var out = compute.residual_lens(data, inputs), pr = data.prompts[inputs.prompt];
      clear(chips);
      el("span", {"class": "g2-hint"}, chips, "token: ");
      pr.tokens.forEach(function (t, j) {
        var b = el("button", {type: "button", "class": "g2-chip" + (j === inputs.token ? " g2-selected" : ""), "data-token": j}, chips, shown(t));
        b.addEventListener("click", function () { inputs.token = j; render(); });
      });
      clear(panels);
      var box = el("div", {"class": "g2-panel g2-wide"}, panels);
      var vals = out.norms.concat([out.norm_after_ln_f]), n = vals.length;
      var W = 380, H = 210, L = 36, R = 6, T = 24, B = 34, bw = (W - L - R) / n;
      var step = niceStep(Math.max.apply(null, vals) * 1.1 / 4), top = step * Math.ceil(Math.max.apply(null, vals) * 1.1 / step);
      var svg = sv("svg", {viewBox: "0 0 " + W + " " + H, "class": "g2-chart", role: "img", "aria-label": "residual norm by layer", "data-role": "norms"}, box);
      function y(v) { return T + (H - T - B) * (1 - v / top); }
      sv("text", {x: L, y: 14, "class": "g2-title"}, svg, "‖x‖ of token " + quoted(shown(out.token)) + " at each layer");
      for (var t = 0; t <= top + 1e-9; t += step) {
        sv("line", {x1: L, x2: W - R, y1: y(t), y2: y(t), "class": t === 0 ? "g2-zero" : "g2-grid"}, svg);
        sv("text", {x: L - 4, y: y(t) + 3, "class": "g2-tick", "text-anchor": "end"}, svg, String(+t.toPrecision(3)));
      }
      vals.forEach(function (v, i) {
        var last = i === n - 1;
        sv("rect", {x: L + i * bw + 4, width: bw - 8, y: y(v), height: y(0) - y(v), "class": "g2-bar " + (last ? "g2-ln" : "g2-input"), "data-layer": i}, svg);
        sv("text", {x: L + (i + 0.5) * bw, y: y(v) - 3, "text-anchor": "middle", "class": "g2-tick"}, svg, v.toFixed(1));
        sv("text", {x: L + (i + 0.5) * bw, y: H - 18, "text-anchor": "middle", "class": "g2-tick"}, svg,
           last ? "after ln_f" : "l = " + i);
      });
      sv("text", {x: (L + W) / 2, y: H - 3, "text-anchor": "middle", "class": "g2-tick"}, svg, "resid_pre.l entering block l (l = " + (n - 2) + ": entering ln_f), then ln_f's output");
      var tb = el("div", {"class": "g2-panel"}, panels);
      el("div", {"class": "g2-title-html"}, tb, "Logit lens: ln_f(resid_pre.l) @ wte.T");
      var table = el("table", {"class": "g2-table", "data-role": "lens"}, tb);
      var hr = el("tr", {}, table);
      ["layer", "‖x‖", "top next token", "p"].forEach(function (h) { el("th", {}, hr, h); });
      out.norms.forEach(function (v, l) {
        var tr = el("tr", {"data-layer": l}, table);
        el("td", {}, tr, String(l));
        el("td", {"data-col": "norm"}, tr, v.toFixed(2));
        el("td", {"data-col": "top"}, tr, shown(out.top[l]));
        el("td", {"data-col": "p"}, tr, out.p_top[l].toFixed(3));
      });
      el("div", {"class": "g2-stats"}, tb, "after ln_f: ‖x‖ = " + out.norm_after_ln_f.toFixed(2) +
         "; the model predicts " + shown(out.model_prediction) + " after " + quoted(out.context) +
         " (␣ is a space, ↵ a new line).");
      api.current = publish(root, inputs, out);
    }
    psel.addEventListener("change", function () {
      inputs.prompt = parseInt(psel.value, 10);
      inputs.token = data.prompts[inputs.prompt].tokens.length - 1;
      render();
    });
    var api = {set: function (patch) { for (var k in patch) inputs[k] = patch[k]; psel.value = String(inputs.prompt); render(); }};
    render();
    return api;
  }

  var MOUNT = {
    norm_explorer: mountNormExplorer, qk_norm: mountQKNorm,
    block_diagram: mountBlockDiagram, residual_lens: mountResidualLens,
  };

  /** Draw figure `id` (its root <div> is already in the page) of the given kind from its data. */
  G.mount = function (id, kind, data) {
    var root = document.getElementById(id);
    if (!root) {  // the output is not attached yet (some front ends run scripts first): retry
      var tries = (G._tries[id] || 0) + 1;
      G._tries[id] = tries;
      if (tries < 200) setTimeout(function () { G.mount(id, kind, data); }, 25);
      else console.warn("gpt2ln: figure " + id + " not found");
      return;
    }
    var body = root.querySelector(".g2-body");
    clear(body);
    root.classList.add("g2-live");
    var api = MOUNT[kind](body, id, data);
    api.state = function () { return JSON.parse(JSON.stringify(api.current)); };
    window.gpt2lnFigures = window.gpt2lnFigures || {};
    window.gpt2lnFigures[id] = api;
  };
  G._tries = {};
  window.gpt2lnLib = G;
})();
