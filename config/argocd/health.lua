-- Health of an inplace-rollout.io/v1alpha1 InPlaceRollout, for Argo CD
-- (resource.customizations.health.inplace-rollout.io_InPlaceRollout in argocd-cm).
-- A spec the controller has not observed yet is Progressing; then the rollout's phase decides:
-- Succeeded is Healthy, Paused (an inconclusive analysis waits for a person) and Holding (at its
-- hold point) are Suspended, RolledBack and Failed are Degraded, any other phase Progressing.
local hs = {}
local status = obj.status
if status == nil or status.phase == nil or status.phase == "" then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to start the rollout"
  return hs
end
if obj.metadata.generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < obj.metadata.generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe the new spec"
  return hs
end
local phase = status.phase
if phase == "Succeeded" then
  hs.status = "Healthy"
elseif phase == "Paused" or phase == "Holding" then
  hs.status = "Suspended"
elseif phase == "RolledBack" or phase == "Failed" then
  hs.status = "Degraded"
else
  hs.status = "Progressing"
end
hs.message = phase
if status.reason ~= nil and status.reason ~= "" then
  hs.message = hs.message .. " (" .. status.reason .. ")"
end
if status.message ~= nil and status.message ~= "" then
  hs.message = hs.message .. ": " .. status.message
end
return hs
