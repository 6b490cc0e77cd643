import { describe, expect, it } from "vitest"
import { renderTemplate, templateError } from "../../src/notify/template.ts"

const data = {
  alert: { id: "alr_1", firstSeenAt: 1_700_000_000_000 },
  alertRule: { id: "rul_1", name: "Too hot", severity: "high", type: "threshold" },
  device: { id: "dev_1", name: "Boiler <room 2>" },
  event: { name: "temperature", data: { celsius: 91.5, sensors: ["a", "b"], note: "say \"hi\"" } }
}

describe("notification templates", () => {
  it("replace the alert's variables", () => {
    expect(renderTemplate("{{alertRule.name}} on {{device.name}} ({{device.id}}), alert {{alert.id}}: {{event.name}}", data)).toBe(
      "Too hot on Boiler <room 2> (dev_1), alert alr_1: temperature"
    )
  })

  it("print objects and arrays as JSON, and reach inside them", () => {
    expect(renderTemplate("{{event.data}}", data)).toBe(JSON.stringify(data.event.data))
    expect(renderTemplate("{{{event.data}}}|{{&event.data.sensors}}", data)).toBe(`${JSON.stringify(data.event.data)}|["a","b"]`)
    expect(renderTemplate("{{event.data.celsius}} {{event.data.sensors.1}} {{alert.firstSeenAt}}", data)).toBe("91.5 b 1700000000000")
  })

  it("render a JSON body without HTML escaping", () => {
    const body = renderTemplate('{"text":"{{device.name}}","data":{{event.data}}}', data)
    expect(JSON.parse(body)).toEqual({ text: "Boiler <room 2>", data: data.event.data })
  })

  it("in a JSON body, escape a value inside a string as string content and print one outside strings as it is", () => {
    const hostile = { ...data, device: { id: "dev_1", name: 'Boiler","alert":"alt_FORGED' } }
    const source = '{"alert":"{{alert.id}}","device":"{{device.name}}","data":{{event.data}},"text":"{{event.data}}","n":{{event.data.celsius}}}'
    const body = renderTemplate(source, hostile, "json")
    expect(JSON.parse(body)).toEqual({
      alert: "alr_1",
      device: 'Boiler","alert":"alt_FORGED',
      data: data.event.data,
      text: JSON.stringify(data.event.data),
      n: 91.5
    })
    // Quotes escaped in the template's own text, sections, and {{{raw}}} as the author wrote them.
    const tricky = '{"a":"say \\"{{device.name}}\\"","b":[{{#event.data.sensors}}"{{.}}",{{/event.data.sensors}}"end"],"c":{{{event.data}}}}'
    expect(JSON.parse(renderTemplate(tricky, hostile, "json"))).toEqual({
      a: 'say "Boiler","alert":"alt_FORGED"',
      b: ["a", "b", "end"],
      c: data.event.data
    })
    expect(renderTemplate('{"x":"{{nothing}}"}', data, "json")).toBe('{"x":""}')
  })

  it("escape values, not the template, when the output is HTML", () => {
    expect(renderTemplate("<b>{{device.name}}</b> {{event.data.sensors}}", data, "html")).toBe(
      "<b>Boiler &lt;room 2&gt;</b> [&quot;a&quot;,&quot;b&quot;]"
    )
  })

  it("render missing variables as nothing", () => {
    expect(renderTemplate("[{{device.serialNumber}}][{{gateway.name}}][{{event.data.missing.deep}}][{{nothing}}]", data)).toBe("[][][][]")
    expect(renderTemplate("[{{device.name}}][{{event.data}}]", { device: null, event: null })).toBe("[][]")
  })

  it("support sections for optional parts", () => {
    const source = "{{#device}}Device {{name}}{{/device}}{{^device}}No device{{/device}}"
    expect(renderTemplate(source, data)).toBe("Device Boiler <room 2>")
    expect(renderTemplate(source, { device: null })).toBe("No device")
  })

  it("expose only the data's own fields", () => {
    expect(renderTemplate("[{{alert.constructor}}][{{device.toString}}][{{__proto__}}]", data)).toBe("[][][]")
    expect(renderTemplate("{{.}}", { alert: { id: "alr_1" } })).toBe(`{"alert":{"id":"alr_1"}}`)
  })

  it("never throw: a malformed template renders as its source and is reported by templateError", () => {
    const source = "{{#device}}unclosed section"
    expect(renderTemplate(source, data)).toBe(source)
    expect(templateError(source)).toMatch(/unclosed section/i)
    expect(renderTemplate("{{device.name", data)).toBe("{{device.name")
    expect(templateError("{{device.name}}")).toBeUndefined()
  })

  it("carry values JSON cannot hold without failing", () => {
    expect(renderTemplate("{{event.data.big}}", { event: { data: { big: 2n ** 70n } } })).toBe("1180591620717411303424")
    const cyclic: Record<string, unknown> = { name: "loop" }
    cyclic.self = cyclic
    expect(renderTemplate("[{{device.name}}][{{alert.id}}]", { device: cyclic, alert: { id: "alr_1" } })).toBe("[][alr_1]")
  })
})
