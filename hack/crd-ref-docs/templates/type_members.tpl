{{- /* crd-ref-docs v0.3.0's markdown template (templates/markdown/type_members.tpl, Apache-2.0), unchanged: gv_list.tpl needs its siblings in the same directory. */ -}}
{{- define "type_members" -}}
{{- $field := . -}}
{{- if eq $field.Name "metadata" -}}
Refer to Kubernetes API documentation for fields of `metadata`.
{{- else -}}
{{ markdownRenderFieldDoc $field.Doc }}
{{- end -}}
{{- end -}}
