module fgpu.local/node-probe

go 1.21
